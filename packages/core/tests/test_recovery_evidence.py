"""Recovery acts only on a log that verifies; leases, escalations and files behave under faults."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import recovery_world as world
from recovery_checks import WORKER, env_for, read_log, run_worker, wait_until_expired
from refund_world import fresh_refunds, later, refund, refunds
from small_disk import run_on_small_disk

from agent_saga import (
    ActionSemantics,
    FileWAL,
    MemoryWAL,
    RetryPolicy,
    SagaAborted,
    call_with,
    saga_scope,
)
from agent_saga.cli.main import main
from agent_saga.cli.recover import recoveryd_main
from agent_saga.engine.report import RollbackReport
from agent_saga.log.chain import ChainUnverified
from agent_saga.recovery import EscalationQueue, RecoveryDaemon, read_lease, recovery_dir
from agent_saga.recovery.escalations import escalate_rollback
from agent_saga.recovery.lease import LeaseKeeper, LeaseLifecycle, lease_path
from agent_saga.semantics import Outcome

__all__ = ["fresh_refunds"]  # the fixture, imported for pytest

C, IRR = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE
def agent_saga(world_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *args], env=env_for(world_dir, role="daemon"),
                          capture_output=True, text=True, timeout=120, check=False)


def recover(world_dir: Path, wal: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return agent_saga(world_dir, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                      "--lease-grace", "0", *extra)


def refs(world_dir: Path, op: str = "refund") -> list[str]:
    return [e["ref"] for e in world.applied(world.entries(world_dir), op)]


def tree_modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(directory)): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in sorted(directory.rglob("*"))}


def dead_saga_log(path: Path, *, newline: bool = True) -> str:
    """An open saga with one committed charge whose undo is known only from its result."""
    with FileWAL(path) as wal:
        wal.append("SAGA_STARTED", "s1", {"name": "checkout", "lease_ttl": 1.0})
        wal.append("STEP_INTENT", "s1", {"tool": "stripe.charge", "semantics": "COMPENSABLE", "op": "o1",
                                         "args": {}, "compensation": None}, 1)
        wal.append("STEP_COMMITTED", "s1", {"op": "o1", "compensation": {
            "handler": "evidence.refund", "kwargs": {"ref": "A"}, "key": "key-1", "recoverable": True}}, 1)
    if not newline:
        path.write_bytes(path.read_bytes()[:-1])
    return "s1"


# -- item 4: recovery verifies the chain first ---------------------------------------------


@pytest.mark.slow
def test_recover_does_not_run_a_tampered_compensation(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after") == 137
    lines = wal.read_bytes().splitlines(keepends=True)
    committed = json.loads(lines[2])
    assert committed["type"] == "STEP_COMMITTED" and committed["body"]["compensation"]["kwargs"] == {"ref": "A"}
    lines[2] = lines[2].replace(b'"kwargs":{"ref":"A"}', b'"kwargs":{"ref":"Z"}')  # the attack
    wal.write_bytes(b"".join(lines))
    wait_until_expired()

    refused = recover(tmp_path, wal)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    (message,) = refused.stderr.splitlines()
    assert "seq 3 (line 3)" in message and "--trust-unverified" in message
    assert refs(tmp_path) == []  # nothing at all runs on an unverified log

    trusted = recover(tmp_path, wal, "--trust-unverified")
    assert "Z" not in refs(tmp_path)  # an edited record is never acted on, even when trusted
    assert refs(tmp_path) == ["C", "B", "A"]  # step 1's undo as its intent recorded it
    assert trusted.returncode == 1, trusted.stdout + trusted.stderr  # a human must look at seq 3
    assert "[unverified-records]" in trusted.stdout
    claimed = [r for r in read_log_unchecked(wal) if r["type"] == "RECOVERY_CLAIMED"]
    assert claimed and all("BROKEN at seq 3" in r["body"]["trust_unverified"] for r in claimed)
    assert claimed[0]["body"]["ignored_seqs"] == [3]


def read_log_unchecked(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_forged_completion_does_not_leave_the_charge_standing(tmp_path: Path) -> None:
    """Item 5: a plain SAGA_COMPLETED line appended for an open saga is a break, never 'partial'."""
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:before") == 137
    records = read_log(wal)
    saga = records[0]["saga"]
    with open(wal, "ab") as fh:
        fh.write(json.dumps({"seq": records[-1]["seq"] + 1, "ts": records[-1]["ts"] + 1,
                             "type": "SAGA_COMPLETED", "saga": saga, "body": {}}).encode() + b"\n")
    wait_until_expired()

    certified = agent_saga(tmp_path, "certify", "--wal-path", str(wal))
    assert certified.returncode == 1 and "seq 5" in certified.stderr
    refused = recover(tmp_path, wal)
    assert refused.returncode == 1 and "seq 5 (line 5)" in refused.stderr
    assert refs(tmp_path) == []

    trusted = recover(tmp_path, wal, "--trust-unverified")
    assert "A" in refs(tmp_path), trusted.stdout + trusted.stderr  # the forged end was not believed
    assert "recovered 1" in trusted.stdout


def test_an_unchained_log_is_refused_and_the_override_is_recorded(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "s1", {"lease_ttl": 1.0})
        wal.append("STEP_INTENT", "s1", {"tool": "t", "semantics": "COMPENSABLE", "compensation": {
            "handler": "evidence.refund", "kwargs": {"ref": "U"}, "key": "k", "recoverable": True}}, 1)
    with RecoveryDaemon(wal_path, clock=later) as daemon, pytest.raises(ChainUnverified) as info:
        daemon.sweep()
    assert "no hash chain" in str(info.value) and "trust_unverified=True" in str(info.value)
    assert refunds == []
    with RecoveryDaemon(wal_path, clock=later, trust_unverified=True) as daemon:
        report = daemon.sweep()
    assert report.recovered == ["s1"] and refunds == ["U"]
    (claimed,) = [r for r in read_log_unchecked(wal_path) if r["type"] == "RECOVERY_CLAIMED"]
    assert claimed["body"]["trust_unverified"] == "unchained"


# -- the final-newline rule, dry runs, unusable recovery directories --------------------------


def test_a_committed_step_whose_newline_was_lost_is_compensated_not_escalated(wal_path: Path) -> None:
    dead_saga_log(wal_path, newline=False)
    with RecoveryDaemon(wal_path, clock=later) as daemon:
        report = daemon.sweep()
    assert refunds == ["A"]
    assert report.recovered == ["s1"] and report.new_escalations == []
    assert not list(wal_path.parent.glob("*.torn-*"))


def test_a_dry_run_changes_nothing_on_disk(wal_path: Path) -> None:
    dead_saga_log(wal_path, newline=False)
    before = snapshot(wal_path.parent)
    with RecoveryDaemon(wal_path, clock=later) as daemon:
        report = daemon.sweep(dry_run=True)
    assert report.recovered == ["s1"] and report.dry_run
    assert snapshot(wal_path.parent) == before
    assert not recovery_dir(wal_path).exists()
    assert main(["recover", "--wal-path", str(wal_path), "--dry-run", "--lease-grace", "0"]) in (0, 1)
    assert snapshot(wal_path.parent) == before
    assert refunds == []


def test_an_uncreatable_recovery_directory_is_one_line_exit_3(wal_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    dead_saga_log(wal_path)
    recovery_dir(wal_path).write_text("a file where the directory should be")
    assert recoveryd_main(["--wal-path", str(wal_path), "--once", "--lease-grace", "0"]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("saga-recoveryd: ") and str(recovery_dir(wal_path)) in line
    assert main(["recover", "--wal-path", str(wal_path), "--lease-grace", "0"]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("agent-saga recover: ")


RECOVERYD = "import sys; from agent_saga.cli.recover import recoveryd_main; sys.exit(recoveryd_main())"


@pytest.mark.slow
def test_watch_mode_retries_after_a_full_disk_instead_of_exiting(tmp_path: Path) -> None:
    stderr = tmp_path / "recoveryd.err"  # outside the small disk
    done = run_on_small_disk(tmp_path, f'''
        import json, signal, subprocess, time
        import recovery_world as world
        wal = DISK / "agent.wal"
        rc = subprocess.run([sys.executable, {str(WORKER)!r}, str(wal), "three"],
                            env=dict(os.environ, RECOVERY_CRASH_EFFECT="charge:C:after")).returncode
        assert rc == 137, rc
        time.sleep(0.5)  # the dead worker's lease runs out
        fill(DISK)
        err = open({str(stderr)!r}, "w")
        daemon = subprocess.Popen(
            [sys.executable, "-c", {RECOVERYD!r}, "--wal-path", str(wal), "--import", "recovery_world",
             "--lease-grace", "0", "--interval", "0.1"],
            env=dict(os.environ, RECOVERY_ROLE="daemon"), stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + 60
        while open({str(stderr)!r}).read().count("retrying") < 2:  # two sweeps failed, and it went on
            assert daemon.poll() is None and time.monotonic() < deadline, open({str(stderr)!r}).read()
            time.sleep(0.05)
        os.unlink(DISK / "filler")  # the disk has room again
        while len(world.applied(world.entries(), "refund")) < 3:
            assert daemon.poll() is None and time.monotonic() < deadline, open({str(stderr)!r}).read()
            time.sleep(0.05)
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=30)
        print(json.dumps({{"rc": daemon.returncode, "out": out,
                          "refunds": [e["ref"] for e in world.applied(world.entries(), "refund")]}}))
    ''', size="256k", env=env_for(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr + stderr.read_text()
    result = json.loads(done.stdout.strip().splitlines()[-1])
    err = stderr.read_text()
    assert result["refunds"] == ["C", "B", "A"], result
    assert "No space left on device" in err and "retrying" in err, err
    assert "Traceback" not in err
    assert result["rc"] == 0, (result, err)


def test_files_recovery_creates_are_private(wal_path: Path) -> None:
    old = os.umask(0o022)
    try:
        dead_saga_log(wal_path)
        keeper = LeaseKeeper(ttl=30, clock=time.time, background=False)
        keeper.hold(wal_path, "s2")
        keeper.tick()
        with RecoveryDaemon(wal_path, clock=later) as daemon:
            daemon.sweep()
        EscalationQueue(recovery_dir(wal_path) / "escalations.jsonl").add("s1", 1, "irreversible", "x")
    finally:
        os.umask(old)
    modes = tree_modes(recovery_dir(wal_path))
    assert {"leases/s2", "ledger.jsonl", "escalations.jsonl", "claims"} <= set(modes), modes
    for name, mode in modes.items():
        path = recovery_dir(wal_path) / name
        assert mode == (0o700 if path.is_dir() else 0o600), (name, oct(mode))


# -- item 12: the escalation queue never says "0 open" about something it cannot read --------


def test_escalations_on_a_file_that_is_not_a_log_fail_like_verify(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\nmilk\n")
    assert main(["escalations", "--wal-path", str(notes)]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "not an agent-saga log" in line and "line 1" in line


def test_a_garbage_escalation_queue_is_exit_3_not_zero_open(wal_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    dead_saga_log(wal_path)
    queue = recovery_dir(wal_path) / "escalations.jsonl"
    queue.parent.mkdir()
    queue.write_bytes(b'{"event":"opened","id":"a","saga":"s1","kind":"irreversible","detail":"x","ts":1}\n'
                      b"\x00\x01 garbage\n")
    assert main(["escalations", "--wal-path", str(wal_path)]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "line 2" in line and str(queue) in line
    # A torn final fragment (a writer killed mid-line) is not garbage: it never counted.
    queue.write_bytes(b'{"event":"opened","id":"a","saga":"s1","kind":"irreversible","detail":"x","ts":1}\n'
                      b'{"event":"ope')
    assert main(["escalations", "--wal-path", str(wal_path)]) == 1
    assert "1 open escalation(s)" in capsys.readouterr().out
    EscalationQueue(queue).add("s1", 2, "no-undo", "y")  # the next writer drops the fragment
    assert len(EscalationQueue(queue).pending()) == 2


# -- item 11: a lease that stops at once, on an injectable clock --------------------------------


class Clock:
    """Time moved by hand; it starts past the records' own times, so only the lease file decides."""

    def __init__(self) -> None:
        self.now = time.time() + 100

    def __call__(self) -> float:
        return self.now


def test_an_abandoned_lease_stops_renewing_at_once_and_the_daemon_takes_over(wal_path: Path) -> None:
    dead_saga_log(wal_path)
    clock = Clock()
    keeper = LeaseKeeper(ttl=30, clock=clock, background=False)
    keeper.hold(wal_path, "s1")
    keeper.tick()
    lease = read_lease(wal_path, "s1")
    assert lease is not None and lease.renewed_at == clock.now
    clock.now += 20
    keeper.tick()
    assert read_lease(wal_path, "s1").renewed_at == clock.now  # type: ignore[union-attr]
    with RecoveryDaemon(wal_path, clock=clock, lease_grace=5) as daemon:
        assert daemon.sweep(dry_run=True).live == ["s1"]

    keeper.abandon(wal_path, "s1")
    renewed = clock.now
    clock.now += 20
    keeper.tick()
    assert lease_path(wal_path, "s1").exists()  # kept: it is what tells the daemon when to step in
    assert read_lease(wal_path, "s1").renewed_at == renewed  # type: ignore[union-attr]
    assert keeper.held() == []
    with RecoveryDaemon(wal_path, clock=clock, lease_grace=5) as daemon:
        assert daemon.sweep(dry_run=True).live == ["s1"]  # still within ttl + grace
        clock.now += 16
        report = daemon.sweep()
    assert report.recovered == ["s1"] and refunds == ["A"]
    assert not lease_path(wal_path, "s1").exists()  # removed once the daemon ended the saga


# -- item 12 + the lifecycle port ----------------------------------------------------------------


def unclean_rollback(wal: FileWAL) -> tuple[str, RollbackReport]:
    """charge (its refund fails), then an IRREVERSIBLE mail: a rollback that ends NOT CLEAN."""
    with pytest.raises(SagaAborted) as info, saga_scope(wal, compensation_retry=RetryPolicy(1)) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch"},
                  compensate=call_with(refund, ref="FAIL-1"))
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")
        raise RuntimeError("the agent gave up")
    wal.barrier()
    return s.saga_id, info.value.report


def queue_of(path: Path) -> EscalationQueue:
    return EscalationQueue(recovery_dir(path) / "escalations.jsonl")


@pytest.mark.slow
def test_an_unclean_ending_is_escalated_once_across_calls_and_processes(wal: FileWAL, tmp_path: Path) -> None:
    saga_id, report = unclean_rollback(wal)
    assert not report.clean
    lifecycle = LeaseLifecycle(LeaseKeeper(ttl=30, background=False))
    lifecycle.ended(saga_id, wal, report)
    lifecycle.ended(saga_id, wal, report)
    escalate_rollback(wal, saga_id, report)
    pickled = tmp_path / "report.pickle"
    pickled.write_bytes(pickle.dumps(report))
    code = textwrap.dedent("""
        import pickle, sys
        from agent_saga import FileWAL
        from agent_saga.recovery.escalations import escalate_rollback
        with FileWAL(sys.argv[1]) as wal:
            escalate_rollback(wal, sys.argv[2], pickle.loads(open(sys.argv[3], "rb").read()))
    """)
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code, str(wal.path), saga_id, str(pickled)], check=True)
    wal.barrier()
    found = sorted((e.step, e.kind) for e in queue_of(wal.path).pending())
    assert found == [(1, "compensation-failing"), (2, "irreversible")]
    escalated = [(r["step"], r["body"]["kind"]) for r in read_log(wal.path) if r["type"] == "ESCALATED"]
    assert sorted(escalated) == found  # written to the log once each, too
    assert main(["escalations", "--wal-path", str(wal.path)]) == 1


def test_an_unclean_ending_no_step_carries_is_filed_once_for_the_saga(wal: FileWAL) -> None:
    report = RollbackReport("s7", "RuntimeError: boom", (), halted=True)
    assert not report.clean
    (filed,) = escalate_rollback(wal, "s7", report)
    assert (filed.step, filed.kind) == (None, "rollback-not-clean")
    assert escalate_rollback(wal, "s7", report) == []
    assert escalate_rollback(MemoryWAL(), "s7", report) == []  # no file, no queue


def test_a_clean_ending_files_nothing_and_releases_the_lease(wal: FileWAL) -> None:
    keeper = LeaseKeeper(ttl=30, background=False)
    lifecycle = LeaseLifecycle(keeper)
    assert lifecycle.started("s9", wal) == {"lease_ttl": 30.0}
    keeper.tick()
    assert lease_path(wal.path, "s9").exists()
    lifecycle.ended("s9", wal, None)
    assert not lease_path(wal.path, "s9").exists() and keeper.held() == []
    assert queue_of(wal.path).all() == []


def test_an_abandoned_rollback_is_escalated_and_the_daemon_does_not_repeat_it(wal_path: Path) -> None:
    wal = FileWAL(wal_path)
    with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch"},
                  compensate=call_with(refund, ref="A"))
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")
        raise RuntimeError("the agent gave up")
    wal.close()
    refunds.clear()
    saga_id, full = s.saga_id, info.value.report
    # As if the rollback had stopped right after settling step 2 (a cancellation).
    lines = wal_path.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"STEP_ORPHANED"' in line) + 1
    wal_path.write_bytes(b"".join(lines[:cut]))
    step2, step1 = full.steps
    # Step 1 was not reached: UNRESOLVED, as the engine reports a step an interrupted unwind left.
    unreached = dataclasses.replace(step1, outcome=Outcome.UNRESOLVED, attempts=0,
                                    detail="rollback interrupted before this step was settled")
    partial = RollbackReport(saga_id, full.cause, (step2, unreached), halted=False)

    keeper = LeaseKeeper(ttl=30, background=False)
    keeper.hold(wal_path, saga_id)
    with FileWAL(wal_path) as wal:
        LeaseLifecycle(keeper).abandoned(saga_id, wal, partial)
    assert keeper.held() == []
    queued = sorted((e.step or 0, e.kind) for e in queue_of(wal_path).pending())
    assert queued == [(0, "rollback-abandoned"), (2, "irreversible")]

    with RecoveryDaemon(wal_path, clock=later) as daemon:
        report = daemon.sweep()
    assert report.recovered == [saga_id] and refunds == ["A"]
    assert report.new_escalations == []  # step 2 was already in the queue and in the log
    assert sorted((e.step or 0, e.kind) for e in queue_of(wal_path).pending()) == [(2, "irreversible")]
    escalated = [r for r in read_log(wal_path) if r["type"] == "ESCALATED" and r.get("step") == 2]
    assert len(escalated) == 1


def test_an_abandoned_rollback_on_a_closed_log_files_nothing(wal_path: Path) -> None:
    wal = FileWAL(wal_path)
    wal.close()
    keeper = LeaseKeeper(ttl=30, background=False)
    keeper.hold(wal_path, "s1")
    LeaseLifecycle(keeper).abandoned("s1", wal, None)
    assert keeper.held() == []
    assert not recovery_dir(wal_path).exists()
