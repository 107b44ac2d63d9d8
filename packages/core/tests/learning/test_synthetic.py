"""Shareable synthetic traffic (issue 28 part 3), on logs written by real sagas on a FileWAL.

The logs hold a completed saga, a saga rolled back by a failing step (a compensation ran),
an UNKNOWN outcome (a connection error mid-call) and a crash (a saga whose process never
wrote its end record). The properties: no value from the arguments reaches the profile or
the synthetic log; synthesize is deterministic for a seed; its records chain and verify
like a real log and are all marked; certify and export refuse them unless told.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    ActionSemantics,
    Compensation,
    FileWAL,
    NotApplied,
    Saga,
    SagaAborted,
    compensator,
    saga_scope,
)
from agent_saga.audit import certify, certify_log, export_bundle
from agent_saga.engine.ports import lifecycles
from agent_saga.log import read_records
from agent_saga.log.chain import verify_file, verify_records
from agent_saga.log.fixture import SYNTHETIC_MARK, SyntheticLog, is_synthetic
from agent_saga.recovery import RecoveryDaemon
from agent_saga.synthetic import ProfileError, WALProfile, synthesize

C = ActionSemantics.COMPENSABLE
ENDS = {"SAGA_COMPLETED", "SAGA_ROLLED_BACK"}
TOOLS = {"crm.lookup", "stripe.charge", "bank.wire", "ship.create", "mail.send"}


@dataclass
class Typed:
    """The values a person typed into the tools' arguments."""

    email: str = "ann.lee@example.com"
    note: str = "leave it at the blue door"
    account: int = 88123401
    amount: float = 4200.75
    meta: dict[str, Any] = field(default_factory=lambda: {"referrer": "newsletter-0917", "visits": 31337017})

    def strings(self) -> set[str]:
        return {self.email, self.note, *self.meta, *(v for v in self.meta.values() if isinstance(v, str))}

    def numbers(self) -> set[float]:
        return {self.account, self.amount, *(v for v in self.meta.values() if isinstance(v, int | float))}


REFUND = "learning.synthetic.refund"


@compensator(REFUND)
def refund(ref: str, cents: int) -> None:
    """An undo the recovery daemon can run from the log (registered, with its kwargs recorded)."""


def refundable(v: Typed) -> Compensation:
    return Compensation(fn=refund, handler=REFUND, kwargs={"ref": v.note, "cents": v.account})


def undo(_result: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def charge_then_fail(
    wal: FileWAL, name: str, v: Typed, charge: int, tool: str, args: dict[str, Any], error: Exception
) -> None:
    """A saga ``name`` that charges ``v``'s card, then calls ``tool``, which raises ``error``: rolled back."""

    def fails() -> None:
        raise error

    with pytest.raises(SagaAborted), saga_scope(wal, name=name) as s:
        s.execute(tool="stripe.charge", semantics=C, args={"amount": v.amount, "currency": "USD", "meta": v.meta},
                  forward=lambda: charge, compensate=undo)
        s.execute(tool=tool, semantics=C, args=args, forward=fails, compensate=undo)


def write_real_log(path: Path, v: Typed) -> Path:
    """Real sagas on a FileWAL: completed, rolled back, UNKNOWN, crashed."""
    wal = FileWAL(path)
    try:
        with saga_scope(wal, name="lookup") as s:
            s.execute(tool="crm.lookup", semantics=C, args={"email": v.email, "account_id": v.account},
                      forward=lambda: {"id": 1}, compensate=lambda r: refundable(v))
            s.execute(tool="mail.send", semantics="IRREVERSIBLE", args={"to": v.email, "body": v.note},
                      forward=lambda: "sent")
        charge_then_fail(wal, "order", v, 1, "ship.create", {"address": v.note},
                         NotApplied(f"address rejected: {v.note}"))
        charge_then_fail(wal, "wire", v, 2, "bank.wire", {"account_id": v.account, "memo": v.note},
                         ConnectionError(f"bank timed out for {v.email}"))
        # A crash: the process that ran this saga never wrote its end record.
        crashed = Saga(wal, name="crashed")
        crashed.start()
        crashed.execute_sync(tool="crm.lookup", semantics=C, args={"email": v.email, "account_id": v.account},
                             forward=lambda: {"id": 3}, compensate=lambda r: refundable(v))
        wal.barrier()
        for hook in lifecycles():  # its lease stops being renewed, as when its process dies
            hook.ended(crashed.saga_id, wal, None)
    finally:
        wal.close()
    return path


@pytest.fixture
def real_log(tmp_path: Path) -> Path:
    return write_real_log(tmp_path / "saga.wal", Typed())


def leaves(value: Any) -> Iterator[Any]:
    """Every key and scalar inside a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def sequences(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in records:
        out.setdefault(r["saga"], []).append(r["type"])
    return out


# -- the log it learns from -----------------------------------------------------------------


def test_the_fixture_log_has_every_fate(real_log: Path) -> None:
    types = [r["type"] for r in read_records(real_log)]
    for wanted in ("SAGA_COMPLETED", "STEP_COMPENSATED", "STEP_UNKNOWN", "STEP_NOT_APPLIED", "SAGA_ROLLED_BACK"):
        assert wanted in types
    made = sequences(list(read_records(real_log)))
    assert len(made) == 4
    assert len([s for s in made.values() if set(s) & ENDS]) == 3, "three sagas ended, the crashed one did not"


# -- nothing typed survives -----------------------------------------------------------------


def check_nothing_typed(
    path: Path, v: Typed, vocabulary: frozenset[str] = frozenset(), **fit: Any
) -> tuple[WALProfile, list[dict[str, Any]]]:
    """No typed string or number in the profile or the synthetic log, except ``vocabulary``.

    ``vocabulary`` is what a profile holds whatever was typed (the profile's own field names,
    tool and argument names, enums, class codes): an arbitrary input may equal one of those
    words ("digits"), which is a coincidence, not a leak.
    """
    profile = WALProfile.fit(read_records(path), **fit)
    text = profile.to_json()
    out = synthesize(profile, sagas=30, seed=11)
    typed = v.strings() - vocabulary
    for where, tree in (("profile", json.loads(text)), ("synthetic log", list(out))):
        found = list(leaves(tree))
        strings = {x for x in found if isinstance(x, str)}
        numbers = {x for x in found if isinstance(x, int | float) and not isinstance(x, bool)}
        assert not (typed & strings), f"a typed string reached the {where}"
        assert not (v.numbers() & numbers), f"a typed number reached the {where}"
        if where == "profile":
            inside = [t for t in typed for x in strings - vocabulary if t in x]
            assert not inside, f"a typed string is inside a string of the profile: {inside}"
    return profile, list(out)


@functools.cache
def vocabulary() -> frozenset[str]:
    """The strings of a profile fitted on other typed values: its words, none of them typed."""
    with tempfile.TemporaryDirectory() as d:
        profile = WALProfile.fit(read_records(write_real_log(Path(d) / "saga.wal", Typed())), redact=["account_id"])
    words = {x for x in leaves(json.loads(profile.to_json())) if isinstance(x, str)}
    return frozenset(words | {SYNTHETIC_MARK, "[redacted]"})


def test_no_typed_value_in_the_profile_or_its_output(real_log: Path) -> None:
    v = Typed()
    raw = real_log.read_text()
    assert v.email in raw and str(v.account) in raw and v.note in raw, "the log does hold the typed values"
    profile, out = check_nothing_typed(real_log, v)
    # What the profile does keep: the tool mix and the engine's own enums.
    kept = {x for x in leaves(json.loads(profile.to_json())) if isinstance(x, str)}
    assert kept >= TOOLS and "COMPENSABLE" in kept
    assert {r["body"].get("tool") for r in out} - {None} <= TOOLS
    # "USD" was not declared an enum: it is a shape (3 capitals), not the value.
    assert "USD" not in kept


def test_a_record_type_the_engine_does_not_write_is_renamed(real_log: Path) -> None:
    wal = FileWAL(real_log)
    try:
        wal.append("ACME_SYNCED_ann.lee@example.com", "app-saga", {"who": "ann"})
        wal.barrier()
    finally:
        wal.close()
    profile = WALProfile.fit(read_records(real_log))
    assert "ann.lee" not in profile.to_json()
    out = synthesize(profile, sagas=40, seed=4)
    assert "OTHER_1" in {r["type"] for r in out} and verify_records(out).status == "intact"


def test_declared_enums_survive_and_redacted_fields_lose_their_shape(real_log: Path) -> None:
    profile = WALProfile.fit(read_records(real_log), redact=["email", "Referrer"], enums={"currency": ["USD", "EUR"]})
    kept = list(leaves(json.loads(profile.to_json())))
    assert "USD" in kept and "EUR" not in kept, "only a declared value that was seen is kept"
    intent = profile.bodies["STEP_INTENT:crm.lookup"]["dict"]["keys"]["args"]["shape"]["dict"]["keys"]
    assert set(intent["email"]["shape"]) == {"redacted"}, "a redacted field keeps no length or classes"
    assert set(intent["account_id"]["shape"]) == {"int"}
    # A nested key is not kept (k1, k2...), but it still names what to redact.
    charge = profile.bodies["STEP_INTENT:stripe.charge"]["dict"]["keys"]["args"]["shape"]["dict"]["keys"]
    meta = charge["meta"]["shape"]["dict"]["keys"]
    assert set(meta) == {"k1", "k2"} and set(meta["k1"]["shape"]) == {"redacted"} and set(meta["k2"]["shape"]) == {"int"}
    out = synthesize(profile, sagas=20, seed=1)
    emails = {r["body"]["args"]["email"] for r in out if r["type"] == "STEP_INTENT" and "email" in r["body"]["args"]}
    assert emails == {"[redacted]"}
    charges = [r["body"]["args"] for r in out if r["type"] == "STEP_INTENT" and r["body"]["tool"] == "stripe.charge"]
    assert charges and {a["currency"] for a in charges} == {"USD"}


typed_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=6, max_size=24)
typed_int = st.integers(10**6, 10**15) | st.integers(-(10**15), -(10**6))
typed_float = st.floats(1e3, 1e12).filter(lambda x: x != math.floor(x))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    email=typed_text, note=typed_text, account=typed_int, amount=typed_float,
    meta=st.dictionaries(typed_text, typed_text | typed_int, max_size=3),
)
def test_property_no_typed_string_or_number_reaches_profile_or_output(
    email: str, note: str, account: int, amount: float, meta: dict[str, Any]
) -> None:
    v = Typed(email, note, account, amount, meta)
    with tempfile.TemporaryDirectory() as d:
        path = write_real_log(Path(d) / "saga.wal", v)
        check_nothing_typed(path, v, vocabulary(), redact=["account_id"])


def test_the_profile_depends_on_shapes_not_values(tmp_path: Path) -> None:
    # Two logs whose typed values differ but have the same shapes: the same bodies in the profile.
    a = WALProfile.fit(read_records(write_real_log(tmp_path / "a.wal", Typed())))
    b = WALProfile.fit(read_records(write_real_log(tmp_path / "b.wal", Typed(
        email="bob.kay@example.org", note="ring it at the green gate", account=77000042, amount=3100.25,
        meta={"campaign": "summersale-2026", "clicks": 12000444},
    ))))
    assert a.bodies == b.bodies


# -- what it keeps ----------------------------------------------------------------------------


def test_event_order_and_tool_mix_are_kept(real_log: Path) -> None:
    records = list(read_records(real_log))
    profile = WALProfile.fit(records)
    out = list(synthesize(profile, sagas=40, seed=3))
    real = {tuple(seq) for seq in sequences(records).values()}
    made = sequences(out)
    assert len(made) == 40
    assert {tuple(seq) for seq in made.values()} <= real, "each synthetic saga replays a real saga's order"
    assert any(not set(seq) & ENDS for seq in made.values()), "crashes too"
    assert {r["body"]["tool"] for r in out if "tool" in r["body"]} == {
        r["body"]["tool"] for r in records if isinstance(r.get("body"), dict) and "tool" in r["body"]}
    # One step's op is the same in its intent and its outcome, as the engine writes it.
    ops: dict[tuple[str, int], set[str]] = {}
    for r in out:
        if "op" in r["body"]:
            ops.setdefault((r["saga"], r["step"]), set()).add(r["body"]["op"])
    assert ops and all(len(o) == 1 for o in ops.values())
    # Ranges: a magnitude like the original's.
    amounts = [r["body"]["args"]["amount"] for r in out if r["type"] == "STEP_INTENT" and "amount" in r["body"]["args"]]
    assert amounts and all(1000 <= a < 10000 for a in amounts)


def test_the_profile_round_trips_and_is_small(real_log: Path, tmp_path: Path) -> None:
    profile = WALProfile.fit(read_records(real_log))
    again = WALProfile.from_json(profile.to_json())
    assert again.to_json() == profile.to_json()
    profile.save(tmp_path / "p.json")
    assert WALProfile.load(tmp_path / "p.json").to_json() == profile.to_json()
    assert len(profile.to_json()) < 20_000
    with pytest.raises(ProfileError, match="not a WAL profile"):
        WALProfile.from_json('{"format": "something else"}')
    with pytest.raises(TypeError, match=r"WALProfile\.fit: record 1 is a dict, not a log record"):
        WALProfile.fit([{"no": "type"}])
    with pytest.raises(ProfileError, match="redact must be a list"):
        WALProfile.fit([], redact="email")


# -- determinism and the chain -----------------------------------------------------------------


def test_synthesize_is_deterministic_for_a_seed(real_log: Path, tmp_path: Path) -> None:
    profile = WALProfile.fit(read_records(real_log))
    first = synthesize(profile, sagas=25, seed=7)
    second = synthesize(WALProfile.from_json(profile.to_json()), sagas=25, seed=7)
    assert first == second
    first.write(tmp_path / "one.wal")
    second.write(tmp_path / "two.wal")
    assert (tmp_path / "one.wal").read_bytes() == (tmp_path / "two.wal").read_bytes()
    other = synthesize(profile, sagas=25, seed=8)
    assert [r["body"] for r in other] != [r["body"] for r in first]


def test_synthetic_records_chain_verify_and_are_all_marked(real_log: Path, tmp_path: Path) -> None:
    out = synthesize(WALProfile.fit(read_records(real_log)), sagas=50, seed=7)
    assert verify_records(out).status == "intact"
    path = out.write(tmp_path / "synthetic.wal")
    report = verify_file(path)
    assert report.status == "intact" and report.records == len(out)
    ran = run_cli("verify", "--wal-path", str(path))
    assert ran.returncode == 0 and "intact" in ran.stdout
    # Read back the way the log is read: the same records, every one marked both ways.
    back = list(read_records(path))
    assert back == list(out)
    assert all(r["body"][SYNTHETIC_MARK] is True and r["saga"].startswith("synthetic-") for r in back)
    # A FileWAL opens it and appends after it: it is a log like any other.
    wal = FileWAL(path)
    try:
        wal.append("SAGA_STARTED", "another", {})
        wal.barrier()
    finally:
        wal.close()
    assert verify_file(path).status == "intact"


def test_the_seed_snippet_runs_as_written(real_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(real_log.parent)  # the snippet opens "saga.wal" where it runs
    snippet = (
        "import json\n"
        "from agent_saga.synthetic import WALProfile, synthesize\n"
        "\n"
        'records = [json.loads(line) for line in open("saga.wal", encoding="utf-8") if line.strip()]\n'
        'profile = WALProfile.fit(records, redact=["email", "account_id"])\n'
        "shareable = synthesize(profile, sagas=50, seed=7)   # every record carries __synthetic__\n"
    )
    scope: dict[str, Any] = {}
    with warnings.catch_warnings():
        # The snippet leaves closing its file to the garbage collector, which warns; it still runs.
        warnings.simplefilter("ignore", ResourceWarning)
        exec(compile(snippet, "seed-snippet", "exec"), scope)
    shareable = scope["shareable"]
    assert len(sequences(list(shareable))) == 50
    assert all(is_synthetic(r) and r["body"]["__synthetic__"] is True for r in shareable)
    assert verify_records(shareable).status == "intact"


def test_a_memory_log_fits_too() -> None:
    from agent_saga import MemoryWAL

    wal = MemoryWAL()
    with saga_scope(wal) as s:
        s.execute(tool="crm.lookup", semantics=C, args={"email": "x@y.z"}, forward=lambda: 1, compensate=undo)
    out = synthesize(WALProfile.fit(wal.records()), sagas=3, seed=1)
    assert verify_records(out).status == "intact" and len(sequences(list(out))) == 3


# -- not evidence -------------------------------------------------------------------------------


@pytest.fixture
def synthetic_log(real_log: Path) -> Path:
    return synthesize(WALProfile.fit(read_records(real_log)), sagas=10, seed=7).write(real_log.parent / "syn.wal")


def test_certify_refuses_a_synthetic_log_unless_told(synthetic_log: Path) -> None:
    with pytest.raises(SyntheticLog, match="synthetic_ok=True"):
        certify_log(synthetic_log)
    with pytest.raises(SyntheticLog):
        certify(read_records(synthetic_log))
    cert = certify_log(synthetic_log, synthetic_ok=True)
    assert any("SYNTHETIC" in n for n in cert.notes) and "SYNTHETIC" in cert.format_text()


def test_a_real_log_is_certified_as_before(real_log: Path) -> None:
    cert = certify_log(real_log)  # no synthetic_ok needed, and no synthetic note
    assert not any("SYNTHETIC" in n for n in cert.notes)


def test_export_refuses_a_synthetic_log_unless_told(synthetic_log: Path, tmp_path: Path) -> None:
    with pytest.raises(SyntheticLog, match="export it as evidence"):
        export_bundle(synthetic_log, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists(), "nothing is written for a refused export"
    result = export_bundle(synthetic_log, tmp_path / "fixture", synthetic_ok=True)
    assert result.manifest["synthetic_records"] == result.manifest["record_count"] > 0
    assert any("SYNTHETIC" in n for n in result.manifest["notes"])


def test_the_cli_refuses_and_says_so_when_allowed(synthetic_log: Path, tmp_path: Path) -> None:
    ran = run_cli("certify", "--wal-path", str(synthetic_log))
    assert ran.returncode == 1 and "--synthetic-ok" in ran.stderr and "__synthetic__" in ran.stderr
    ran = run_cli("certify", "--wal-path", str(synthetic_log), "--synthetic-ok")
    assert "SYNTHETIC" in ran.stdout and "test fixture" in ran.stdout
    ran = run_cli("export", "--wal-path", str(synthetic_log), "--out", str(tmp_path / "b1"))
    assert ran.returncode == 1 and "--synthetic-ok" in ran.stderr
    ran = run_cli("export", "--wal-path", str(synthetic_log), "--out", str(tmp_path / "b2"), "--synthetic-ok")
    assert ran.returncode == 0 and "SYNTHETIC" in ran.stdout


def test_the_synthesize_verb_fits_and_writes(real_log: Path, tmp_path: Path) -> None:
    prof, out = tmp_path / "profile.json", tmp_path / "shareable.wal"
    ran = run_cli("synthesize", "--fit", str(real_log), "--profile-out", str(prof), "--redact", "email",
                  "--enum", "currency=USD,EUR")
    assert ran.returncode == 0, ran.stderr
    assert "4 saga(s)" in ran.stdout and Typed().email not in prof.read_text()
    ran = run_cli("synthesize", "--profile", str(prof), "--sagas", "12", "--seed", "5", "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert out.read_bytes() == synthesize(WALProfile.load(prof), sagas=12, seed=5).write(tmp_path / "x.wal").read_bytes()
    assert run_cli("synthesize", "--profile", str(prof), "--out", str(out)).returncode == 3  # exists
    assert run_cli("synthesize", "--out", str(out)).returncode == 2
    assert run_cli("synthesize", "--fit", str(real_log)).returncode == 2
    bad = run_cli("synthesize", "--fit", str(real_log), "--profile-out", str(prof), "--enum", "currency")
    assert bad.returncode == 2 and "FIELD=VALUE1,VALUE2" in bad.stderr


# -- the recovery daemon on synthetic traffic ------------------------------------------------------


def test_the_recovery_daemon_recovers_synthetic_crashes(real_log: Path, tmp_path: Path) -> None:
    out = synthesize(WALProfile.fit(read_records(real_log)), sagas=60, seed=2)
    crashed = {s for s, seq in sequences(list(out)).items() if not set(seq) & ENDS}
    assert crashed
    path = out.write(tmp_path / "load.wal")
    with RecoveryDaemon(path, clock=lambda: 4_000_000_000.0) as daemon:
        report = daemon.sweep()
    assert report.open_sagas == len(crashed)
    assert set(report.recovered) == crashed
    # Every crm.lookup of the real log had a registered undo: each synthetic crash's undo ran from
    # the log, with synthetic kwargs.
    assert report.compensated == len(crashed)
    assert verify_file(path).status == "intact", "the daemon's own records chain onto the synthetic log"
