"""A compaction or redaction counts only when an operator key the agent does not hold signed it.

The attack (issue 25, item 4): an agent that can write its own log removes a dead
saga's records from the middle -- a committed charge nobody refunded -- and appends
one correctly chained COMPACTION record saying "settled sagas". Before attestations
were signed, ``verify --expect-head`` passed, ``certify`` said CERTIFIED, ``export``
shipped the log and ``recover`` had nothing to undo. Now the attestation is a break
for all four, whether it is unsigned, signed by a key of the agent's own, or signed
by a trusted key over a body that does not add up.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from operator_support import trusted_operator_key, untrusted_operator_key

from agent_saga import ActionSemantics, Compensation, FileWAL, saga_scope
from agent_saga.audit import certify_log, export_bundle, verify_log
from agent_saga.log import ChainUnverified, compact, read_records, redact_record
from agent_saga.log.codec import seal
from agent_saga.log.maintenance import LogMaintenanceError
from agent_saga.recovery.lease import lease_keeper

C = ActionSemantics.COMPENSABLE
Record = dict[str, Any]
Body = Callable[[list[Record], int, str], dict[str, Any]]


def undo(result: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="refund")


def settled(wal: FileWAL, name: str) -> str:
    with saga_scope(wal, name=name) as s:
        s.execute(tool="pay.charge", semantics=C, forward=lambda: {"id": name}, compensate=undo)
        return s.saga_id


def dead(wal: FileWAL) -> str:
    """A saga that charged (COMPENSABLE, committed) and never ended: its process 'died'."""
    def run() -> str:
        s = saga_scope(wal, name="dead").__enter__()
        s.execute(tool="pay.charge", semantics=C, forward=lambda: {"id": "ch_dead", "amount": 80000}, compensate=undo)
        # A dead process renews nothing; a held lease would also have the keeper's thread
        # writing lease files into a temporary directory while it is being removed.
        lease_keeper().release(wal.path, s.saga_id)
        return s.saga_id

    return contextvars.copy_context().run(run)  # its own context: it does not stay current here


def log_with_a_dead_saga_in_the_middle(path: Path) -> str:
    wal = FileWAL(path)
    settled(wal, "before")
    victim = dead(wal)
    settled(wal, "after")
    wal.barrier()
    wal.close()
    return victim


def runs(records: list[Record]) -> list[list[Record]]:
    out: list[list[Record]] = []
    for r in records:
        if out and r["seq"] == out[-1][-1]["seq"] + 1:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def ranges(removed: list[Record]) -> list[dict[str, Any]]:
    """The removed ranges exactly as a compaction writes them."""
    return [{
        "first": run[0]["seq"], "last": run[-1]["seq"], "count": len(run), "last_hash": run[-1]["hash"],
        "hashes_sha256": hashlib.sha256("\n".join(r["hash"] for r in run).encode()).hexdigest(),
    } for run in runs(removed)]


def unsigned_body(removed: list[Record], seq: int, prev: str) -> dict[str, Any]:
    """What ``compact`` wrote before attestations were signed: the agent can write this itself."""
    return {"removed": ranges(removed), "records": len(removed), "by": "agent-saga compact",
            "reason": "settled sagas", "rule": "settled sagas (SAGA_COMPLETED, or SAGA_ROLLED_BACK with clean=true)"}


def new_body(removed: list[Record], terminal: Record | None = None) -> dict[str, Any]:
    """A body in today's shape, naming the removed saga with ``terminal`` (default: its last record)."""
    saga = removed[0]["saga"]
    return {**unsigned_body(removed, 0, ""), "sagas": [
        {"saga": saga, "records": len(removed), "terminal": terminal or removed[-1]},
    ]}


def signed_by(key_file: Path, body: Callable[[list[Record]], dict[str, Any]]) -> Body:
    def make(removed: list[Record], seq: int, prev: str) -> dict[str, Any]:
        from agent_saga.log.attestation import OperatorKey

        return OperatorKey.load(key_file).sign("COMPACTION", seq, prev, body(removed))

    return make


def hide(path: Path, saga: str, body: Body) -> int:
    """Remove ``saga``'s records from the log and append a correctly chained COMPACTION record."""
    lines = path.read_bytes().splitlines()
    records = [json.loads(line) for line in lines]
    removed = [r for r in records if r["saga"] == saga]
    assert removed and records[-1]["saga"] != saga  # from the middle
    head = records[-1]["hash"]
    seq = records[-1]["seq"] + 1
    data, _, _ = seal([(seq, time.time_ns() // 1000, "COMPACTION", "", None, body(removed, seq, head))], head, True)
    kept = [line for line, r in zip(lines, records, strict=True) if r["saga"] != saga]
    path.write_bytes(b"".join(line + b"\n" for line in kept) + data)
    return seq


def assert_refused_everywhere(path: Path, head: str, seq: int, why: str, tmp_path: Path) -> None:
    """verify (with the head taken before), certify and export all refuse, naming the attestation."""
    report = verify_log(path, expect_head=head)
    assert report.status == "broken", report.format_text()
    assert f"the COMPACTION record at seq {seq} cannot be trusted" in report.reason
    assert why in report.reason
    with pytest.raises(ChainUnverified, match=f"COMPACTION record at seq {seq}"):
        certify_log(path)
    assert not certify_log(path, allow_unverified=True).certified
    with pytest.raises(ChainUnverified, match=f"COMPACTION record at seq {seq}"):
        export_bundle(path, tmp_path / "bundle")


def test_an_unsigned_attestation_hiding_a_dead_saga_is_a_break(wal_path: Path, tmp_path: Path) -> None:
    victim = log_with_a_dead_saga_in_the_middle(wal_path)
    head = verify_log(wal_path).head
    assert head is not None
    seq = hide(wal_path, victim, unsigned_body)
    assert_refused_everywhere(wal_path, head, seq, "carries no operator signature", tmp_path)


def test_an_attestation_signed_by_a_key_of_the_agents_own_is_a_break(
    wal_path: Path, tmp_path: Path, operator_key: Path
) -> None:
    victim = log_with_a_dead_saga_in_the_middle(wal_path)
    head = verify_log(wal_path).head
    assert head is not None
    agents_key = untrusted_operator_key(tmp_path)  # the agent made it; root never trusted it
    seq = hide(wal_path, victim, signed_by(agents_key, new_body))
    assert_refused_everywhere(wal_path, head, seq, "which is not a trusted operator key", tmp_path)


@pytest.mark.parametrize("lie", ["names-its-last-record", "claims-a-completion", "names-no-saga", "miscounts"])
def test_a_trusted_signature_over_a_body_that_does_not_add_up_is_a_break(
    wal_path: Path, tmp_path: Path, operator_key: Path, lie: str
) -> None:
    """An operator's key signed a body that hides an unsettled saga: the verifier checks what it can."""
    victim = log_with_a_dead_saga_in_the_middle(wal_path)
    head = verify_log(wal_path).head
    assert head is not None

    def body(removed: list[Record]) -> dict[str, Any]:
        out = new_body(removed)
        if lie == "claims-a-completion":
            # The dead saga's last record relabelled SAGA_COMPLETED: its hash no longer adds up.
            out["sagas"][0]["terminal"] = {**removed[-1], "type": "SAGA_COMPLETED"}
        elif lie == "names-no-saga":
            out["sagas"] = []
        elif lie == "miscounts":
            out["records"] -= 1
        return out

    why = {
        "names-its-last-record": "was not settled: the record named as its terminal",
        "claims-a-completion": "does not add up: the header does not match its hash",
        "names-no-saga": "it names no removed saga",
        "miscounts": "records were removed, but its ranges hold",
    }[lie]
    seq = hide(wal_path, victim, signed_by(operator_key, body))
    assert_refused_everywhere(wal_path, head, seq, why, tmp_path)


def test_compact_without_a_key_refuses_and_changes_nothing(wal_path: Path, tmp_path: Path) -> None:
    log_with_a_dead_saga_in_the_middle(wal_path)
    before = wal_path.read_bytes()
    with pytest.raises(ValueError, match="must be signed by an operator key") as refused:
        compact(wal_path)
    message = str(refused.value)
    assert "\n" not in message
    assert "agent-saga approvals keygen" in message and "agent-saga approvals trust" in message
    with pytest.raises(ValueError, match="not trusted on this host"):
        compact(wal_path, signer=untrusted_operator_key(tmp_path))
    with pytest.raises(ValueError, match="must be signed by an operator key"):
        redact_record(wal_path, 1, by="dpo", reason="erasure")
    assert wal_path.read_bytes() == before


def test_compact_with_keep_never_removes_a_saga_that_is_not_settled(wal_path: Path, operator_key: Path) -> None:
    victim = log_with_a_dead_saga_in_the_middle(wal_path)
    before = wal_path.read_bytes()
    with pytest.raises(LogMaintenanceError, match=f"saga '{victim}', which is not settled"):
        compact(wal_path, keep=lambda r: r["saga"] != victim, signer=operator_key)
    assert wal_path.read_bytes() == before
    assert verify_log(wal_path).ok


def test_a_signed_compaction_keeps_the_dead_saga_and_verifies_certifies_and_exports(
    wal_path: Path, tmp_path: Path, operator_key: Path
) -> None:
    victim = log_with_a_dead_saga_in_the_middle(wal_path)
    result = compact(wal_path, signer=operator_key)
    records = list(read_records(wal_path))
    attestation = records[-1]
    assert attestation["type"] == "COMPACTION"
    assert attestation["body"]["signature"]["key"].startswith("ops@example+")
    named = attestation["body"]["sagas"]
    assert [entry["terminal"]["type"] for entry in named] == ["SAGA_COMPLETED", "SAGA_COMPLETED"]
    assert sum(entry["records"] for entry in named) == result.removed == attestation["body"]["records"]
    assert {r["saga"] for r in records} == {victim, ""}  # the dead saga stays, whole
    report = verify_log(wal_path)
    assert report.ok, report.format_text()
    cert = certify_log(wal_path)
    assert not cert.certified  # the dead saga's charge is still owed, and still visible
    assert [u.saga for u in cert.unaccounted] == [victim]
    assert export_bundle(wal_path, tmp_path / "bundle").report.ok


def test_a_signed_redaction_verifies_and_an_unsigned_one_is_a_break(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("STEP_COMMITTED", "a", {"email": "ann@example.com"}, 1)
        wal.append("SAGA_COMPLETED", "a", {})
    redact_record(wal_path, 1, by="dpo", reason="erasure", signer=operator_key)
    assert verify_log(wal_path).ok
    # The agent strips the signature (or writes its own REDACTION): the erasure is unexplained.
    records = list(read_records(wal_path))
    attestation = records[-1]
    del attestation["body"]["signature"]
    data, _, _ = seal([(attestation["seq"], attestation["ts"], "REDACTION", "", None, attestation["body"])],
                      records[-2]["hash"], True)
    lines = wal_path.read_bytes().splitlines(keepends=True)
    wal_path.write_bytes(b"".join(lines[:-1]) + data)
    report = verify_log(wal_path)
    assert report.status == "broken"
    assert report.bad_seq == 1
    assert "the REDACTION record at seq 3 cannot be trusted: it carries no operator signature" in report.reason


def test_an_attestation_cannot_be_checked_without_the_trusted_keys(wal_path: Path, operator_key: Path) -> None:
    log_with_a_dead_saga_in_the_middle(wal_path)
    compact(wal_path, signer=operator_key)
    assert verify_log(wal_path).ok
    from agent_saga.log.attestation import operator_keys_path

    operator_keys_path().unlink()  # a host that trusts no operator: nothing can vouch for the gap
    report = verify_log(wal_path)
    assert report.status == "broken"
    assert "not a trusted operator key" in report.reason


# -- the same attack through the CLI, as an operator would meet it --------------------------

@pytest.mark.slow
@pytest.mark.parametrize("signer", ["unsigned", "agents-own-key"])
def test_the_cli_refuses_a_log_whose_dead_saga_was_hidden(tmp_path: Path, signer: str) -> None:
    import recovery_world as world
    from recovery_checks import env_for, run_worker, wait_until_expired

    wal = tmp_path / "agent.wal"
    with FileWAL(wal) as log:
        settled(log, "before")
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:after") == 137
    with FileWAL(wal) as log:
        settled(log, "after")
    records = list(read_records(wal))
    victim = next(r["saga"] for r in records if r["type"] == "SAGA_STARTED" and r["body"].get("name") == "three")
    head = records[-1]["hash"]
    body = unsigned_body if signer == "unsigned" else signed_by(untrusted_operator_key(tmp_path), new_body)
    seq = hide(wal, victim, body)
    wait_until_expired()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_saga", *args, "--wal-path", str(wal)],
                              env=env_for(tmp_path, role="daemon"), capture_output=True, text=True,
                              timeout=120, check=False)

    named = f"COMPACTION record at seq {seq} cannot be trusted"
    verified = cli("verify", "--expect-head", head)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert named in verified.stdout
    certified = cli("certify")
    assert certified.returncode == 1
    assert "NOT CERTIFIED" in certified.stdout or named in certified.stderr
    assert "\nCERTIFIED" not in certified.stdout and not certified.stdout.startswith("CERTIFIED")
    exported = cli("export", "--out", str(tmp_path / "bundle"))
    assert exported.returncode == 1
    assert named in exported.stderr
    assert not (tmp_path / "bundle" / "records.jsonl").exists()
    recovered = cli("recover", "--import", "recovery_world", "--lease-grace", "0")
    assert recovered.returncode == 1, recovered.stdout + recovered.stderr
    assert named in recovered.stderr
    assert "nothing" not in recovered.stdout
    assert world.applied(world.entries(tmp_path), "refund") == []  # and nothing was guessed at


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pick=st.integers(0, 10_000))
def test_any_change_to_a_signed_body_resealed_by_the_agent_is_a_break(pick: int) -> None:
    """The signature covers the whole body: change any field, re-chain it correctly, and it no longer counts."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.wal"
        key = trusted_operator_key(Path(tmp))
        log_with_a_dead_saga_in_the_middle(path)
        compact(path, signer=key)
        records = list(read_records(path))
        attestation = records[-1]
        body = attestation["body"]
        leaves = [p for p in _leaves(body) if p[0] != "signature"]
        where = leaves[pick % len(leaves)]
        parent = body
        for part in where[:-1]:
            parent = parent[part]
        old = parent[where[-1]]
        parent[where[-1]] = (not old if isinstance(old, bool) else old + 1 if isinstance(old, int)
                             else (old or "") + "x" if isinstance(old, str) or old is None else old)
        assert parent[where[-1]] != old
        data, _, _ = seal([(attestation["seq"], attestation["ts"], "COMPACTION", "", None, body)],
                          attestation["prev"], True)
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:-1]) + data)
        report = verify_log(path)
        assert report.status == "broken", (where, report.format_text())
        assert f"the COMPACTION record at seq {attestation['seq']} cannot be trusted" in report.reason
