"""Offline mesh sagas (issue 29 part 2): merging devices' own logs as a G-Set CRDT.

The device logs are real: written by FileWAL through the engine, one file per
device, each enrolled with its own key and signed at each barrier (issue 40: a hub
takes a device's records only up to its last signed head; test_mesh_claims.py).
The properties are checked on records held in memory (merging a merged result's
records is what syncing a merged file does), and the consumers on files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import ActionSemantics, FileWAL, call_with, compensator
from agent_saga.audit import certify_log
from agent_saga.engine.saga import Saga
from agent_saga.learning import build_corpus
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.chain import verify_file
from agent_saga.log.codec import canonical, chain_hash
from agent_saga.log.file import read_records
from agent_saga.log.maintenance import settled_sagas
from agent_saga.mesh import MeshError, device_keys_path, enrol, merge, sign_head
from agent_saga.notekeys import generate_signer
from agent_saga.recovery import RecoveryDaemon, fold
from agent_saga.recovery.lease import lease_keeper
from agent_saga.ui import FileSource, RunStore, reconstruct, to_mermaid

C = ActionSemantics.COMPENSABLE
UNDONE: list[int] = []


@compensator("test.mesh.cancel")
def cancel(n: int, idempotency_key: str | None = None) -> None:
    UNDONE.append(n)


# One key per device name, made once: the module-scoped fleet is written before any test's host exists.
_PAIRS = {name: generate_signer(f"{name}-device") for name in ("phone", "laptop", "watch", "same")}
KEYS = {name: OperatorKey(private) for name, (private, _) in _PAIRS.items()}


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    UNDONE.clear()
    yield
    UNDONE.clear()


@pytest.fixture(autouse=True)
def _hub_trusts_the_devices() -> None:
    # The hub's list, in this test's host (conftest moves the host under tmp_path).
    keys = device_keys_path()
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_text("".join(public + "\n" for _, public in _PAIRS.values()))


def _device(path: Path, saga_id: str, bookings: list[int], *, end: str | None) -> Path:
    """One device's own log: a saga (``saga_id``) booking each n, then ended as ``end`` says (None: it died).

    Each device books through its own tool (``<device>.book``): step keys derive from (saga, step,
    tool), and two devices' step 1 of one saga must not share a key (docs/MESH.md). The device is
    enrolled with its key and signs its head after each step and at the end, as a device that signs
    at each sync would, so that a prefix of its log is signed up to its last head.
    """
    key = KEYS[path.stem]
    enrol(path, key)
    wal = FileWAL(path)
    saga = Saga(wal, name="trip", saga_id=saga_id)
    saga.start()
    for n in bookings:
        saga.execute_sync(tool=f"{path.stem}.book", semantics=C, forward=lambda n=n: {"booked": n},
                          compensate=call_with(cancel, n=n))
        wal.barrier()  # the head is signed at a barrier: everything before it is on disk
        sign_head(path, key)
    if end == "completed":
        saga.complete_sync()
    wal.barrier()
    lease_keeper().release(wal.path, saga.saga_id)
    wal.close()
    sign_head(path, key)
    return path


def _records(path: Path) -> list[dict[str, Any]]:
    return list(read_records(path))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Three devices' full logs (as records); a saga, ``trip``, spans phone and laptop."""
    d = tmp_path_factory.mktemp("mesh")
    return {
        "phone": _records(_device(d / "phone.wal", "trip", [1, 2], end="completed")),
        "laptop": _records(_device(d / "laptop.wal", "trip", [3], end=None)),
        "watch": _records(_device(d / "watch.wal", "alone", [4, 5, 6], end="completed")),
    }


# -- the CRDT: order, duplication, grouping, partition and rejoin -------------------------------


def _full(fleet: dict[str, list[dict[str, Any]]]) -> bytes:
    return merge(list(fleet.values())).data


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_any_order_duplication_and_grouping_of_syncs_gives_the_same_bytes(
    fleet: dict[str, list[dict[str, Any]]], data: st.DataObject
) -> None:
    # Snapshots: prefixes of each device's log (what an earlier sync carried), each full log at least once.
    snaps = list(fleet.values())
    for name in data.draw(st.lists(st.sampled_from(sorted(fleet)), max_size=6)):
        log = fleet[name]
        snaps.append(log[: data.draw(st.integers(1, len(log)))])
    snaps = data.draw(st.permutations(snaps))
    # Merge them as a random tree: repeatedly replace two (or one, re-merged alone) by their merge.
    pool: list[Any] = list(snaps)
    while len(pool) > 1:
        i = data.draw(st.integers(0, len(pool) - 1))
        a = pool.pop(i)
        j = data.draw(st.integers(0, len(pool) - 1))
        b = pool.pop(j)
        pool.append(list(merge([a, b]).records))
    once = merge([pool[0]])
    assert once.ok
    assert once.data == _full(fleet)
    assert merge([pool[0], pool[0]]).data == once.data  # idempotent


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_partitioned_replicas_that_rejoin_converge(fleet: dict[str, list[dict[str, Any]]], data: st.DataObject) -> None:
    names = sorted(fleet)
    # Each replica sits on a device and first knows only a prefix of that device's log.
    grown = {n: data.draw(st.integers(1, len(fleet[n]))) for n in names}
    replicas: dict[str, list[Any]] = {n: [fleet[n][: grown[n]]] for n in names}
    for _ in range(data.draw(st.integers(0, 8))):
        if data.draw(st.booleans()):  # a device writes more of its own log while partitioned
            n = data.draw(st.sampled_from(names))
            grown[n] = data.draw(st.integers(grown[n], len(fleet[n])))
            replicas[n] = [list(merge([*replicas[n], fleet[n][: grown[n]]]).records)]
        else:  # a partial sync between two replicas, one way
            src, dst = data.draw(st.sampled_from(names)), data.draw(st.sampled_from(names))
            replicas[dst] = [list(merge([*replicas[dst], *replicas[src]]).records)]
    # Rejoin: every device writes the rest of its log and every replica syncs with every other.
    for n in names:
        replicas[n] = [list(merge([*replicas[n], fleet[n]]).records)]
    everything = [r for n in names for r in replicas[n]]
    final = {n: merge([*replicas[n], *everything]).data for n in names}
    assert set(final.values()) == {_full(fleet)}


def test_the_merged_log_verifies_and_keeps_each_device_record_intact(
    fleet: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    result = merge(list(fleet.values()))
    out = result.write(tmp_path / "m.wal")
    report = verify_file(out)
    assert report.status == "intact", report.label
    merged = _records(out)
    assert merged[0]["type"] == "MESH_MERGED"
    heads = {d["device"]: d["head"] for d in merged[0]["body"]["devices"]}
    # A device is the hash of its first record: what its own chain commits to.
    assert set(heads) == {log[0]["hash"] for log in fleet.values()}
    own = {r["hash"]: r for log in fleet.values() for r in log}
    for r in merged[1:]:
        origin = own[r["mesh"]["hash"]]
        assert (r["body"], r["salt"], r["digest"], r["ts"], r["type"], r["saga"]) == (
            origin["body"], origin["salt"], origin["digest"], origin["ts"], origin["type"], origin["saga"])
    assert len(merged) - 1 == sum(len(log) for log in fleet.values())
    # Canonical order: by the clock each record states, each device's records in their own order.
    assert [r["ts"] for r in merged[1:]] == sorted(r["ts"] for r in merged[1:])


# -- tampering: always caught, named (device, seq, why), never merged -----------------------------


def _rehash(r: dict[str, Any]) -> dict[str, Any]:
    r = dict(r)
    r["digest"] = hashlib.sha256(bytes.fromhex(r["salt"]) + canonical(r["body"]).encode()).hexdigest()
    r["hash"] = chain_hash(r)
    return r


def _tamper(log: list[dict[str, Any]], kind: str, k: int) -> list[dict[str, Any]]:
    out = [dict(r) for r in log]
    if kind == "body":
        out[k]["body"] = {**out[k]["body"], "forged": True}
    elif kind == "header":
        out[k]["ts"] += 1
    elif kind == "swap":
        out[k], out[k + 1] = out[k + 1], out[k]
    elif kind == "drop":  # truncated in the middle
        del out[k]
    elif kind == "forge":  # altered and re-hashed, as whoever holds the log could
        out[k]["body"] = {**out[k]["body"], "forged": True}
        out[k] = _rehash(out[k])
    return out


@settings(max_examples=examples(60), deadline=None)
@given(
    name=st.sampled_from(["phone", "laptop", "watch"]),
    kind=st.sampled_from(["body", "header", "swap", "drop", "forge"]),
    where=st.floats(0, 1),
    with_genuine=st.booleans(),
)
def test_a_tampered_record_is_always_caught_and_never_merged(
    fleet: dict[str, list[dict[str, Any]]], name: str, kind: str, where: float, with_genuine: bool
) -> None:
    genuine = fleet[name]
    k = min(int(where * (len(genuine) - 2)), len(genuine) - 3) + 1  # not the first, nor the last
    tampered = _tamper(genuine, kind, k)
    others = [log for n, log in fleet.items() if n != name]
    result = merge([tampered, *others, *([genuine] if with_genuine else [])])
    device = genuine[0]["hash"]
    # Named where the tampered input breaks (the rest of the device's chain then waits for a signed head).
    named = [x for x in result.excluded if x.device == device and x.source]
    assert named, f"{kind} at seq {k + 1} was not caught"
    assert all(x.seq is not None and k + 1 <= x.seq <= k + 2 and x.why for x in named)
    genuine_hashes = {r["hash"] for r in genuine}
    taken = [r for r in result.records[1:] if r["mesh"]["device"] == device]
    assert all(r["mesh"]["hash"] in genuine_hashes and "forged" not in r["body"] for r in taken)
    if with_genuine:
        assert len(taken) == len(genuine)  # the genuine copy's records are all there
    elif kind == "forge":
        # Re-hashed, the record checks on its own; the next record's link breaks, and neither it nor
        # the one before it is merged (nor what no signed head before them covers).
        assert max(r["mesh"]["seq"] for r in taken) <= k


def test_a_fork_is_held_out_and_a_later_merge_of_the_merged_log_reaches_the_same_verdict(
    fleet: dict[str, list[dict[str, Any]]]
) -> None:
    genuine = fleet["watch"]
    # The log cloned onto a second device that holds the same key: the clone signs its own last head.
    last = genuine[-1]
    body = KEYS["watch"].sign("DEVICE_HEAD", last["seq"], last["prev"], {"device": genuine[0]["hash"], "clone": 2})
    forged = [*genuine[:-1], _rehash({**last, "body": body})]
    first = merge([forged, fleet["phone"]])
    assert first.ok  # alone, a clone's signed head cannot be told from the real one
    # Re-hashed by anyone without the key, the last head is refused on its own.
    assert "not signed by the device's own key" in merge([_tamper(genuine, "forge", len(genuine) - 1)]).excluded[0].why
    later = merge([list(first.records), genuine])
    waits, fork = later.excluded  # the record before the fork, which no signed head covers now, and the fork
    assert fork.device == genuine[0]["hash"] and fork.seq == len(genuine) and "forked" in fork.why
    assert waits.seq == len(genuine) - 1 and "beyond the device's last signed head" in waits.why
    assert merge([genuine, fleet["phone"], forged]).data == later.data  # associativity, with the fork
    assert merge([list(later.records)]).data == later.data
    held = later.records[0]["body"]["held"]
    assert sorted(h["record"]["hash"] for h in held) == sorted([genuine[-2]["hash"], genuine[-1]["hash"], forged[-1]["hash"]])


def test_an_edited_origin_in_a_merged_log_is_caught(fleet: dict[str, list[dict[str, Any]]]) -> None:
    merged = [dict(r) for r in merge([fleet["watch"]]).records]
    merged[3] = {**merged[3], "mesh": {**merged[3]["mesh"], "seq": 9}}
    result = merge([merged])
    assert [(x.seq, x.held) for x in result.excluded if x.source] == [(9, len(fleet["watch"]) - 2)]
    assert "does not match its hash" in result.excluded[0].why


def test_what_a_log_says_is_shown_inert(fleet: dict[str, list[dict[str, Any]]]) -> None:
    # A merged log's origin names the device as any text: an escape sequence there is shown, not obeyed.
    evil = "\x1b]0;pwned\x07\x1b[2J"
    merged = [dict(r) for r in merge([fleet["watch"]]).records]
    merged[1:] = [{**r, "mesh": {**r["mesh"], "device": evil}} for r in merged[1:]]
    result = merge([merged])
    (x,) = result.excluded
    assert x.device == evil and "not the hash of this chain's first record" in x.why
    shown = result.format_text()
    assert "\x1b" not in shown and "\x07" not in shown and "\\x1b]0;pwned" in shown


def test_inputs_that_cannot_be_merged_are_refused_in_one_line(tmp_path: Path, fleet: dict[str, Any]) -> None:
    plain = FileWAL(tmp_path / "plain.wal", chain=False)
    plain.append("SAGA_STARTED", "s", {})
    plain.barrier()
    plain.close()
    with pytest.raises(MeshError, match=r"no hash chain .*write device logs chained"):
        merge([tmp_path / "plain.wal"])
    with pytest.raises(MeshError, match="first record is seq 2, not 1"):
        merge([fleet["watch"][1:]])
    appended = [*merge([fleet["watch"]]).records, {**fleet["watch"][0], "seq": 99}]
    with pytest.raises(MeshError, match="written to the merged log after the merge"):
        merge([appended])


# -- the merged view feeds every reader; a saga spanning two devices is one saga -------------------


@pytest.fixture
def spanning(tmp_path: Path) -> Path:
    """``trip`` booked 1 and 2 on the phone (its part completed), then 3 on the laptop, which died."""
    phone = _device(tmp_path / "phone.wal", "trip", [1, 2], end="completed")
    laptop = _device(tmp_path / "laptop.wal", "trip", [3], end=None)
    result = merge([phone, laptop])
    assert result.ok
    return result.write(tmp_path / "merged.wal")


def test_fold_and_certify_see_one_saga_open_until_every_device_part_ends(spanning: Path) -> None:
    (view,) = fold(_records(spanning)).values()
    assert view.saga_id == "trip" and view.open and sorted(view.steps) == [1, 2, 3]
    cert = certify_log(spanning)  # the merged log verifies, so certify judges its records
    assert not cert.certified and cert.sagas == 1
    assert sorted(u.step for u in cert.unaccounted) == [1, 2, 3]
    assert all("no end record" in u.why for u in cert.unaccounted)


def test_compaction_keeps_a_spanning_saga_until_it_is_settled_as_a_whole(spanning: Path, tmp_path: Path) -> None:
    # The phone's SAGA_COMPLETED settles its part only: the laptop's booking may still need an undo.
    assert settled_sagas(_records(spanning)) == set()
    phone = _device(tmp_path / "p" / "phone.wal", "trip", [1], end="completed")
    laptop = _device(tmp_path / "l" / "laptop.wal", "trip", [2], end="completed")
    assert settled_sagas(merge([phone, laptop]).records) == {"trip"}
    with RecoveryDaemon(spanning, clock=lambda: 4e9, lease_grace=0) as daemon:
        daemon.sweep()  # the daemon rolls the whole saga back, cleanly, in the merged log's own records
    assert settled_sagas(_records(spanning)) == {"trip"}


def test_certify_a_spanning_saga_whose_parts_all_completed(tmp_path: Path) -> None:
    phone = _device(tmp_path / "phone.wal", "trip", [1], end="completed")
    laptop = _device(tmp_path / "laptop.wal", "trip", [2], end="completed")
    out = merge([phone, laptop]).write(tmp_path / "m.wal")
    cert = certify_log(out)
    assert cert.certified and cert.sagas == 1 and cert.effects == 2


def test_graph_ui_and_corpus_show_the_spanning_saga_as_one(spanning: Path) -> None:
    (saga,) = reconstruct(_records(spanning))
    assert [s.index for s in saga.steps] == [1, 2, 3]
    drawn = run_cli("graph", "--wal", str(spanning))
    assert drawn.returncode == 0 and drawn.stdout.count(".book") == 3
    assert [s.tool for s in saga.steps] == ["phone.book", "phone.book", "laptop.book"]
    assert "laptop.book" in to_mermaid([saga])
    store = RunStore(FileSource(spanning))
    store.refresh()
    runs = store.runs()
    assert runs["chain"]["status"] == "intact"
    assert [(r["id"], r["steps"], r["status"]) for r in runs["runs"]] == [("trip", 3, "open")]
    corpus = build_corpus(spanning)
    assert sorted((e.step, e.args) for e in corpus) == [(1, {}), (2, {}), (3, {})]
    assert {e.saga_outcome for e in corpus} == {"open"}


def test_the_recovery_daemon_rolls_back_the_whole_spanning_saga(spanning: Path) -> None:
    with RecoveryDaemon(spanning, clock=lambda: 4e9, lease_grace=0) as daemon:
        report = daemon.sweep()
    assert report.recovered == ["trip"]
    assert UNDONE == [3, 2, 1]  # newest first, across both devices
    assert verify_file(spanning).status == "intact"
    (view,) = fold(_records(spanning)).values()
    assert view.ended == "SAGA_ROLLED_BACK"
    with pytest.raises(MeshError, match="after the merge"):
        merge([spanning])  # the daemon's records are the merged log's own: merge device logs instead


def test_two_devices_steps_of_one_saga_that_share_an_idempotency_key_are_named(tmp_path: Path) -> None:
    # The same tool as step 1 of one saga on two devices: the engine derives the same keys.
    one = _device(tmp_path / "one" / "same.wal", "trip", [1], end="completed")
    two = _device(tmp_path / "two" / "same.wal", "trip", [2], end="completed")
    result = merge([one, two])
    assert not result.excluded and not result.ok
    assert len(result.clashes) == 2  # the forward's op key and the undo's key
    assert all("saga trip: step 1 " in c and "and step 2 " in c for c in result.clashes)
    assert result.records[0]["body"]["clashes"] == list(result.clashes)
    assert merge([one]).ok


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_merge_writes_the_log_and_exits_by_what_it_left_out(tmp_path: Path, fleet: dict[str, Any]) -> None:
    phone = _device(tmp_path / "phone.wal", "trip", [1], end="completed")
    evil = tmp_path / "laptop.wal"
    _device(evil, "trip", [2], end=None)
    ok = run_cli("mesh", "merge", str(phone), str(evil), "--out", str(tmp_path / "m.wal"))
    assert ok.returncode == 0 and "2 device(s)" in ok.stdout
    lines = evil.read_text().splitlines()
    record = json.loads(lines[2])
    record["body"]["note"] = "\x1b[2Jrm -rf /"  # agent text in a forged record
    lines[2] = json.dumps(record)
    evil.write_text("\n".join(lines) + "\n")
    bad = run_cli("mesh", "merge", str(phone), str(evil), "--out", str(tmp_path / "m2.wal"))
    assert bad.returncode == 1
    assert f"EXCLUDED device {json.loads(lines[0])['hash'][:16]} seq 3..{len(lines)} in {evil}" in bad.stdout
    assert "\x1b" not in bad.stdout
    assert verify_file(tmp_path / "m2.wal").status == "intact"
    as_json = run_cli("mesh", "merge", str(phone), str(evil), "--out", str(tmp_path / "m3.wal"), "--json")
    payload = json.loads(as_json.stdout)
    assert payload["ok"] is False and payload["excluded"][0]["seq"] == 3
    refused = run_cli("mesh", "merge", str(tmp_path / "missing.wal"), "--out", str(tmp_path / "m4.wal"))
    assert refused.returncode == 3 and not (tmp_path / "m4.wal").exists()
    headless = tmp_path / "headless.wal"
    headless.write_text("".join(line + "\n" for line in evil.read_text().splitlines()[1:]))
    refused = run_cli("mesh", "merge", str(phone), str(headless), "--out", str(tmp_path / "m5.wal"))
    assert refused.returncode == 3 and not (tmp_path / "m5.wal").exists()
    assert "first record is seq 2, not 1" in refused.stderr and "nothing was written" in refused.stderr
