"""Redaction and compaction: the chain stays verifiable and no concurrent append is lost."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from open_saga import leave_open, settle_two
from operator_support import trusted_operator_key

from agent_saga import ActionSemantics, Compensation, FileWAL, SagaAborted, saga_scope
from agent_saga.audit import verify_log
from agent_saga.log import compact, read_records, redact_record, redact_where
from agent_saga.log.maintenance import LogMaintenanceError, settled_sagas

C, IRR, R = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE, ActionSemantics.REVERSIBLE


def undo(r: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def run_sagas(wal: FileWAL) -> dict[str, str]:
    """Four sagas on the real engine: completed, clean rollback, unclean rollback, open."""
    settled = settle_two(wal, undo)
    ids = {"completed": settled["done"], "clean": settled["undone"]}
    with pytest.raises(SagaAborted), saga_scope(wal, name="stranded") as s:
        ids["unclean"] = s.saga_id
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")
        raise RuntimeError("model gave up")

    ids["open"] = leave_open(wal, undo, release=True)  # its process is gone: nothing renews the lease
    wal.barrier()
    return ids


def test_redaction_erases_body_and_salt_and_keeps_the_chain(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("STEP_COMMITTED", "a", {"email": "ann@example.com", "amount": 4200}, 1)
        wal.append("SAGA_COMPLETED", "a", {})
    result = redact_record(wal_path, 1, by="dpo@example.com", reason="GDPR art. 17 request #12", signer=operator_key)
    assert result.seqs == (1,)
    assert result.record_seq == 3
    raw = wal_path.read_text()
    assert "ann@example.com" not in raw
    assert '"amount"' not in raw  # the key, not "4200": that may turn up in a timestamp or a hash
    records = list(read_records(wal_path))
    erased = records[0]
    assert "body" not in erased
    assert "salt" not in erased
    assert erased["redacted"]["by"] == "dpo@example.com"
    assert records[2]["type"] == "REDACTION"
    assert records[2]["body"]["seqs"] == [1]
    assert records[2]["body"]["reason"] == "GDPR art. 17 request #12"
    report = verify_log(wal_path)
    assert report.ok
    assert report.redacted == (1,)
    # Idempotent: erasing again changes nothing and writes no second REDACTION record.
    before = wal_path.read_bytes()
    assert redact_record(wal_path, 1, by="dpo", reason="again", signer=operator_key).seqs == ()
    assert wal_path.read_bytes() == before


def test_redaction_refuses_what_it_must_not_erase(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_STARTED", "a", {})
    redact_record(wal_path, 1, by="dpo", reason="erasure", signer=operator_key)
    with pytest.raises(LogMaintenanceError, match="REDACTION record"):
        redact_record(wal_path, 2, by="dpo", reason="erasure", signer=operator_key)
    with pytest.raises(LogMaintenanceError, match="no record has seq 9"):
        redact_record(wal_path, 9, by="dpo", reason="erasure", signer=operator_key)
    with pytest.raises(ValueError, match="by= must say who"):
        redact_record(wal_path, 1, by="", reason="erasure", signer=operator_key)
    with pytest.raises(ValueError, match="reason= must say why"):
        redact_record(wal_path, 1, by="dpo", reason=" ", signer=operator_key)
    assert verify_log(wal_path).ok


def test_redact_where_erases_every_match_in_one_rewrite(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        for i in range(6):
            wal.append("STEP_COMMITTED", f"s{i % 2}", {"user": "bob" if i % 3 == 0 else "eve", "i": i}, 1)
    result = redact_where(wal_path, lambda r: r["body"].get("user") == "bob", by="dpo", reason="erasure", signer=operator_key)
    assert result.seqs == (1, 4)
    users = [r.get("body", {}).get("user") for r in read_records(wal_path)]
    assert users[:6] == [None, "eve", "eve", None, "eve", "eve"]
    assert verify_log(wal_path).ok


def test_the_path_face_refuses_a_predicate_or_seq_it_cannot_use_and_leaves_the_log(wal_path: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("STEP_COMMITTED", "s0", {"user": "bob"}, 1)
    before = wal_path.read_bytes()
    with pytest.raises(TypeError, match=r"predicate must be a callable \(record\) -> bool, got 'bob'"):
        redact_where(wal_path, "bob", by="dpo", reason="erasure")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"seq must be a record's sequence number \(int\), got True"):
        redact_record(wal_path, True, by="dpo", reason="erasure")
    assert wal_path.read_bytes() == before


def test_compaction_drops_settled_sagas_and_attests_them(wal_path: Path, operator_key: Path) -> None:
    wal = FileWAL(wal_path)
    ids = run_sagas(wal)
    before = list(read_records(wal_path))
    assert settled_sagas(before) == {ids["completed"], ids["clean"]}
    result = compact(wal_path, signer=operator_key)
    after = list(read_records(wal_path))
    sagas_left = {r["saga"] for r in after}
    assert sagas_left == {ids["unclean"], ids["open"], ""}
    removed = [r for r in before if r["saga"] in (ids["completed"], ids["clean"])]
    assert result.removed == len(removed)
    attestation = after[-1]
    assert attestation["type"] == "COMPACTION"
    assert attestation["seq"] == before[-1]["seq"] + 1
    covered = {s for rng in attestation["body"]["removed"] for s in range(rng["first"], rng["last"] + 1)}
    assert covered == {r["seq"] for r in removed}
    report = verify_log(wal_path)
    assert report.ok, report.format_text()
    # Kept records are byte-for-byte what they were.
    kept_before = [r for r in before if r["saga"] in sagas_left]
    assert after[:-1] == kept_before
    # The open saga's writer goes on, seq continuing after the attestation.
    wal.append("STEP_COMMITTED", ids["open"], {"late": True}, 9)
    wal.barrier()
    last = list(read_records(wal_path))[-1]
    assert last["seq"] == attestation["seq"] + 1
    assert last["prev"] == attestation["hash"]
    assert verify_log(wal_path).ok
    wal.close()


def test_attestations_survive_later_compactions(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        for i in range(4):
            wal.append("SAGA_COMPLETED", f"s{i}", {})
    compact(wal_path, keep=lambda r: r["saga"] == "s1", signer=operator_key)
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_COMPLETED", "s9", {})
    compact(wal_path, keep=lambda r: False, signer=operator_key)
    records = list(read_records(wal_path))
    assert [r["type"] for r in records] == ["COMPACTION", "COMPACTION"]
    report = verify_log(wal_path)
    assert report.ok
    assert report.compacted == ((1, 4), (6, 6))
    assert compact(wal_path, keep=lambda r: False, signer=operator_key).removed == 0  # nothing left to remove


def test_a_broken_log_is_never_rewritten(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        for i in range(3):
            wal.append("SAGA_COMPLETED", f"s{i}", {"amount": 10})
    damaged = wal_path.read_bytes().replace(b'"amount":10', b'"amount":99', 1)
    wal_path.write_bytes(damaged)
    with pytest.raises(LogMaintenanceError, match="BROKEN at seq 1"):
        compact(wal_path, signer=operator_key)
    with pytest.raises(LogMaintenanceError, match="launder"):
        redact_record(wal_path, 2, by="dpo", reason="erasure", signer=operator_key)
    assert wal_path.read_bytes() == damaged


def test_a_torn_tail_is_set_aside_before_rewriting(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_COMPLETED", "a", {})
        wal.append("SAGA_STARTED", "b", {})
    with open(wal_path, "ab") as fh:
        fh.write(b'{"digest":"12')
    compact(wal_path, signer=operator_key)
    assert verify_log(wal_path).ok
    saved = list(wal_path.parent.glob("test.wal.torn-*"))
    assert len(saved) == 1
    assert saved[0].read_bytes() == b'{"digest":"12'


def test_an_unchained_log_can_be_compacted_without_claiming_a_chain(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_COMPLETED", "a", {})
        wal.append("SAGA_STARTED", "b", {})
    compact(wal_path, signer=operator_key)
    records = list(read_records(wal_path))
    assert [r["type"] for r in records] == ["SAGA_STARTED", "COMPACTION"]
    assert "hash" not in records[-1]
    assert verify_log(wal_path).status == "unchained"


def all_but(saga: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: bool(r["saga"] != saga)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6), st.sampled_from(["a", "b", "c"]), st.booleans()),
        st.tuples(st.just("redact"), st.integers(0, 10_000)),
        st.tuples(st.just("compact"), st.sampled_from(["a", "b", "c", "settled"])),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_any_sequence_of_appends_redactions_and_compactions_stays_verifiable(
    steps: list[tuple[Any, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.wal"
        operator_key = trusted_operator_key(Path(tmp))
        wal = FileWAL(path)
        highest = 0
        try:
            for op in steps:
                if op[0] == "append":
                    _, count, saga, finish = op
                    for i in range(count):
                        wal.append("STEP_COMMITTED", saga, {"i": i}, i + 1)
                    if finish:
                        wal.append("SAGA_COMPLETED", saga, {})
                    wal.barrier()
                elif op[0] == "redact":
                    candidates = [r["seq"] for r in read_records(path) if r["type"] not in ("COMPACTION", "REDACTION")]
                    if candidates:
                        redact_record(path, candidates[op[1] % len(candidates)], by="t", reason="r", signer=operator_key)
                elif op[1] == "settled":
                    compact(path, signer=operator_key)
                elif op[1] in settled_sagas(read_records(path)) or all(
                    r["saga"] != op[1] for r in read_records(path)
                ):
                    compact(path, keep=all_but(op[1]), signer=operator_key)
                else:
                    # Removing records of a saga that is not settled could hide an undo still owed.
                    with pytest.raises(LogMaintenanceError, match="not settled"):
                        compact(path, keep=all_but(op[1]), signer=operator_key)
                records = list(read_records(path))
                report = verify_log(path)
                assert report.ok, report.format_text()
                if records:
                    # A sequence number never restarts or goes back.
                    assert records[-1]["seq"] >= highest
                    highest = records[-1]["seq"]
        finally:
            wal.close()


APPENDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from agent_saga.log import FileWAL
    path, handshake, free = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    wal = FileWAL(path)
    def wait_for(p):
        deadline = time.monotonic() + 30
        while not p.exists():
            if time.monotonic() > deadline:
                sys.exit("no ack for " + str(p))
            time.sleep(0.002)
    for i in range(handshake):
        wal.barrier(wal.append("STEP_COMMITTED", "appender", {"i": i}, i + 1))
        if i % 25 == 24:
            (path.parent / f"ready-{i // 25}").touch()
            wait_for(path.parent / f"ack-{i // 25}")
    (path.parent / "free").touch()
    for i in range(handshake, handshake + free):
        wal.barrier(wal.append("STEP_COMMITTED", "appender", {"i": i}, i + 1))
    wal.close()
""")


def _wait(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.002)


@pytest.mark.slow
def test_compaction_and_redaction_lose_nothing_a_concurrent_process_appends(tmp_path: Path, operator_key: Path) -> None:
    path = tmp_path / "shared.wal"
    handshake, free = 150, 300
    FileWAL(path).close()
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(handshake), str(free)],
                            stderr=subprocess.PIPE)
    mine = FileWAL(path)
    rnd = random.Random(7)
    rewrites = 0
    try:
        # Phase 1: the other process is parked between appends, holding its descriptor of
        # the file we are about to replace; its next append must land in the new file.
        for k in range(handshake // 25):
            _wait(tmp_path / f"ready-{k}", proc)
            mine.append("SAGA_STARTED", f"settled-{k}", {})
            mine.append("SAGA_COMPLETED", f"settled-{k}", {})
            mine.barrier()
            compact(path, signer=operator_key)
            ours = [r["seq"] for r in read_records(path) if r["saga"] == "appender" and "body" in r]
            redact_record(path, rnd.choice(ours), by="dpo", reason="erasure", signer=operator_key)
            rewrites += 2
            (tmp_path / f"ack-{k}").touch()
        # Phase 2: free-running; rewrites race its flushes for the lock.
        _wait(tmp_path / "free", proc)
        k = 0
        while proc.poll() is None:
            mine.append("SAGA_COMPLETED", f"late-{k}", {})
            mine.barrier()
            compact(path, signer=operator_key)
            rewrites += 1
            k += 1
    finally:
        _, err = proc.communicate(timeout=60)
        mine.close()
    assert proc.returncode == 0, err.decode()
    records = list(read_records(path))
    appended = [r for r in records if r["saga"] == "appender"]
    assert len(appended) == handshake + free  # not one record lost
    assert sorted(r["step"] for r in appended) == list(range(1, handshake + free + 1))
    assert all(r["body"]["i"] == r["step"] - 1 for r in appended if "body" in r)
    report = verify_log(path)
    assert report.ok, report.format_text()
    assert len(report.redacted) == handshake // 25
    assert rewrites >= 2 * (handshake // 25) + 1
    assert not list(tmp_path.glob(".shared.wal.rewrite-*"))  # no temp file left behind


def test_a_writer_in_this_process_follows_the_replaced_file(wal_path: Path, operator_key: Path) -> None:
    wal = FileWAL(wal_path)
    wal.append("SAGA_COMPLETED", "a", {})
    wal.barrier()
    old_inode = os.stat(wal_path).st_ino
    compact(wal_path, signer=operator_key)
    assert os.stat(wal_path).st_ino != old_inode
    wal.append("SAGA_STARTED", "b", {})
    wal.barrier()
    wal.close()
    types = [r["type"] for r in read_records(wal_path)]
    assert types == ["COMPACTION", "SAGA_STARTED"]
    assert verify_log(wal_path).ok
    assert json.loads(wal_path.read_bytes().splitlines()[-1])["seq"] == 3


def test_a_partly_chained_log_can_still_be_redacted(wal_path: Path, operator_key: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("STEP_COMMITTED", "a", {"email": "old@example.com"}, 1)
    with FileWAL(wal_path) as wal:
        wal.append("STEP_COMMITTED", "a", {"email": "new@example.com"}, 2)
    redact_where(wal_path, lambda r: "email" in r["body"], by="dpo", reason="erasure", signer=operator_key)
    assert "@example.com" not in wal_path.read_text()
    records = list(read_records(wal_path))
    assert records[-1]["type"] == "REDACTION"
    assert records[-1]["prev"] == records[-2]["hash"]  # continues the chained tail
    assert verify_log(wal_path).status == "partial"
