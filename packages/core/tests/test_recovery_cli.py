"""`agent-saga recover` / `agent-saga escalations` / `saga-recoveryd`, run as real processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import recovery_world as world
from recovery_checks import chain_ok, env_for, read_log, run_worker, wait_until_expired, world_counts

from agent_saga.ids import operation_id
from agent_saga.recovery import fold

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process


def agent_saga(world_dir: Path, *args: str, role: str = "daemon") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_saga", *args], env=env_for(world_dir, role=role),
        capture_output=True, text=True, timeout=120, check=False,
    )


def recoveryd(world_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from agent_saga.cli.recover import recoveryd_main; sys.exit(recoveryd_main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env_for(world_dir, role="daemon"),
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_worker_killed_inside_third_effect_is_unwound_by_the_cli(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    code = run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after")
    assert code == 137
    before = read_log(wal)
    assert [r["type"] for r in before][-1] == "STEP_INTENT"  # the third call never returned
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "charge")] == ["A", "B", "C"]
    wait_until_expired()

    done = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                      "--lease-grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recovered 1" in done.stdout

    items = world.entries(tmp_path)
    refunds = world.applied(items, "refund")
    assert [e["ref"] for e in refunds] == ["C", "B", "A"]  # newest first
    saga = before[0]["saga"]
    for step, refund in zip((3, 2, 1), refunds, strict=True):
        assert refund["key"] == operation_id(saga, step, "world.charge", "compensate")
        assert refund["role"] == "daemon"

    view = fold(read_log(wal))[saga]
    assert view.ended == "SAGA_ROLLED_BACK"
    assert view.steps[3].unknown  # the daemon recorded the in-flight step as UNKNOWN first
    assert all(view.steps[i].compensated for i in (1, 2, 3))
    assert chain_ok(wal)

    size = wal.stat().st_size
    again = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                       "--lease-grace", "0")
    assert again.returncode == 0, again.stderr
    assert wal.stat().st_size == size
    assert world_counts(world.entries(tmp_path), "attempt", role="daemon") == world_counts(refunds, "applied")


def test_missing_log_is_exit_3_in_one_line(tmp_path: Path) -> None:
    for args in (["recover", "--wal-path", str(tmp_path / "nope.wal")],
                 ["escalations", "--wal-path", str(tmp_path / "nope.wal")]):
        done = agent_saga(tmp_path, *args)
        assert done.returncode == 3
        assert "no log at" in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_corrupt_log_is_exit_3_and_nothing_is_undone(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after")
    lines = wal.read_bytes().splitlines(keepends=True)
    lines[1] = b'{"seq": 2, garbage\n'
    wal.write_bytes(b"".join(lines))
    wait_until_expired()
    done = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                      "--lease-grace", "0")
    assert done.returncode == 3
    assert "not a record" in done.stderr
    assert "Traceback" not in done.stderr
    assert world.applied(world.entries(tmp_path), "refund") == []


def test_bad_import_is_a_usage_error(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:A:after")
    done = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "no_such_module_xyz")
    assert done.returncode == 2
    assert "--import no_such_module_xyz" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_handlers_every_step_escalates_once_and_nothing_runs(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after")
    wait_until_expired()
    for _ in range(3):
        done = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--lease-grace", "0")
        assert done.returncode == 1, done.stderr
    assert world.applied(world.entries(tmp_path), "refund") == []
    listing = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert listing.returncode == 1
    assert "handler-missing" in listing.stdout
    assert "1 open escalation(s)" in listing.stdout  # step 3 blocks; 2 and 1 wait behind it
    escalated = [r for r in read_log(wal) if r["type"] == "ESCALATED"]
    assert len(escalated) == 1

    # Started again with the import, the daemon finishes and answers the escalation.
    done = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                      "--lease-grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "refund")] == ["C", "B", "A"]
    listing = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert listing.returncode == 0
    assert "0 open escalation(s)" in listing.stdout


def test_escalations_resolve_and_dry_run(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    run_worker(wal, tmp_path, "four", RECOVERY_CRASH_AT="idle:3")
    wait_until_expired()
    size = wal.stat().st_size
    dry = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                     "--lease-grace", "0", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would recover 1" in dry.stdout
    assert "[irreversible]" in dry.stdout
    assert wal.stat().st_size == size
    assert world.applied(world.entries(tmp_path), "refund") == []

    done = recoveryd(tmp_path, "--wal-path", str(wal), "--import", "recovery_world",
                     "--lease-grace", "0", "--once")
    assert done.returncode == 1, done.stdout + done.stderr  # the notify is a human's now
    listing = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert listing.returncode == 1
    eid = listing.stdout.split()[0]
    resolved = agent_saga(tmp_path, "escalations", "--wal-path", str(wal), "--resolve", eid,
                          "--note", "apologised to ops")
    assert resolved.returncode == 0, resolved.stderr
    assert any(r["type"] == "ESCALATION_RESOLVED" and r["body"]["note"] == "apologised to ops"
               for r in read_log(wal))
    unknown = agent_saga(tmp_path, "escalations", "--wal-path", str(wal), "--resolve", "feedfeed")
    assert unknown.returncode == 2
    assert "no escalation 'feedfeed'" in unknown.stderr
    assert chain_ok(wal)


def _unknown_step(wal: Path) -> str:
    """A saga whose one step raised (UNKNOWN), escalated into the log's queue; its id."""
    from agent_saga import FileWAL, SagaAborted, saga_scope

    def lost() -> None:
        raise RuntimeError("the answer was lost")

    log = FileWAL(wal)
    try:
        with pytest.raises(SagaAborted), saga_scope(log, name="pay") as s:
            s.execute(tool="pay", semantics="COMPENSABLE", forward=lost, compensate=lambda r: None)
        return s.saga_id
    finally:
        log.close()


def test_escalations_of_a_log_written_anew_are_marked_stale_and_not_counted_open(tmp_path: Path) -> None:
    # issue 44 §11: the queue beside a log outlives it; a log deleted and written again at the same
    # path (an example run twice) must not list the old log's sagas as open work.
    wal = tmp_path / "agent.wal"
    gone = _unknown_step(wal)
    wal.unlink()
    here = _unknown_step(wal)
    listing = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert listing.returncode == 1, listing.stderr  # the escalation of the log as it is still needs a human
    lines = {w[3]: w[1] for w in map(str.split, listing.stdout.splitlines()) if len(w) > 3 and w[2] == "saga"}
    assert lines == {gone: "STALE", here: "OPEN"}
    assert "1 open escalation(s)" in listing.stdout
    assert f"1 stale: their saga is not in {wal}" in listing.stdout
    eid = next(line.split()[0] for line in listing.stdout.splitlines() if here in line)
    assert agent_saga(tmp_path, "escalations", "--wal-path", str(wal), "--resolve", eid).returncode == 0
    after = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert after.returncode == 0 and "0 open escalation(s)" in after.stdout  # only the stale one is left


def test_escalations_of_a_deleted_log_are_listed_stale_not_refused(tmp_path: Path) -> None:
    # issue 44 §11: a log deleted and not written again leaves its queue behind; the listing said
    # only "no log at" (exit 3), so those escalations could be neither seen nor told apart from work.
    wal = tmp_path / "agent.wal"
    gone = _unknown_step(wal)
    wal.unlink()
    listing = agent_saga(tmp_path, "escalations", "--wal-path", str(wal))
    assert listing.returncode == 0, listing.stderr  # nothing in it is open work
    assert [w[1] for w in map(str.split, listing.stdout.splitlines()) if gone in w] == ["STALE"]
    assert "0 open escalation(s)" in listing.stdout
    assert f"1 stale: their log {wal} is gone; delete {wal}.recovery once" in listing.stdout
    eid = listing.stdout.split()[0]
    refused = agent_saga(tmp_path, "escalations", "--wal-path", str(wal), "--resolve", eid)
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"no log at {wal} to record the resolution in" in refused.stderr
    assert not wal.exists()  # refusing created no log
    missing = agent_saga(tmp_path, "escalations", "--wal-path", str(tmp_path / "never.wal"))
    assert missing.returncode == 3 and "no log at" in missing.stderr  # no queue either: still refused


def test_watch_mode_recovers_a_saga_that_dies_while_it_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    import signal
    import time

    wal = tmp_path / "agent.wal"
    wal.write_bytes(b"")
    with subprocess.Popen(
        [sys.executable, "-m", "agent_saga", "recover", "--watch", "--interval", "0.1", "--wal-path",
         str(wal), "--import", "recovery_world", "--lease-grace", "0"],
        env=env_for(tmp_path, role="daemon"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as watcher:
        assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:after") == 137
        deadline = time.monotonic() + 60
        while len(world.applied(world.entries(tmp_path), "refund")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, out + err
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "refund")] == ["B", "A"]
    assert "recovered 1" in out


def test_an_encrypted_log_is_escalated_without_its_key_and_recovered_with_it(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("cryptography")
    from agent_saga.log.crypto import generate_key

    key = generate_key()
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after",
                      AGENT_SAGA_WAL_KEY=key, RECOVERY_SETTLE="lease") == 137
    # Without the key the daemon cannot read the lease length in the log; the lease file has it.
    assert all("enc" in r and "body" not in r for r in _raw(wal))
    wait_until_expired()

    blind = agent_saga(tmp_path, "recover", "--wal-path", str(wal), "--import", "recovery_world",
                       "--lease-grace", "0")
    assert blind.returncode == 1, blind.stdout + blind.stderr
    assert "[unreadable]" in blind.stdout
    assert world.applied(world.entries(tmp_path), "refund") == []

    done = subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", "recovery_world",
         "--lease-grace", "0"], env=env_for(tmp_path, role="daemon", AGENT_SAGA_WAL_KEY=key),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "refund")] == ["C", "B", "A"]
    wrong = subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal)],
        env=env_for(tmp_path, role="daemon", AGENT_SAGA_WAL_KEY=generate_key()),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert wrong.returncode == 3
    assert "Traceback" not in wrong.stderr


def _raw(path: Path) -> list[dict[str, object]]:
    import json

    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.05)


def _watch(wal: Path, tmp_path: Path, stderr: Any, **env: str) -> subprocess.Popen[str]:
    """``agent-saga recover --watch`` over ``wal`` as the host's daemon (its undos from recovery_world)."""
    return subprocess.Popen(
        [sys.executable, "-m", "agent_saga", "recover", "--watch", "--interval", "0.1", "--wal-path",
         str(wal), "--import", "recovery_world", "--lease-grace", "0"],
        env=env_for(tmp_path, role="daemon", **env), stdout=subprocess.PIPE, stderr=stderr, text=True,
    )


@contextmanager
def _reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc``, killed and reaped on the way out if it still runs: a failed test leaves no daemon behind."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_a_stop_during_a_sweep_lets_the_undo_in_progress_finish(tmp_path: Path, stop: str) -> None:
    import signal

    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:after") == 137
    with _reaped(_watch(wal, tmp_path, subprocess.PIPE, RECOVERY_EFFECT_DELAY="2")) as watcher:
        # Each refund takes 2 s: the stop lands while the second one (A, after B) is under way.
        _wait_for(lambda: len(world.applied(world.entries(tmp_path), "refund")) == 1, "the first refund")
        watcher.send_signal(getattr(signal, stop))
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, out + err
    assert "Traceback" not in err, err
    # The world, not the daemon's word: the unwind it had begun is whole.
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "refund")] == ["B", "A"]


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_watch_mode_waits_for_a_log_that_does_not_exist_yet(tmp_path: Path, stop: str) -> None:
    import signal

    wal = tmp_path / "later" / "agent.wal"  # neither the log nor its directory exists yet
    err_path = tmp_path / "watch.err"
    with open(err_path, "w") as err:
        watcher = _watch(wal, tmp_path, err)
    with _reaped(watcher):
        _wait_for(lambda: watcher.poll() is not None or "waiting for it to appear" in err_path.read_text(),
                  "the daemon says it waits")
        assert watcher.poll() is None, err_path.read_text()  # not exit 3: it waits
        wal.parent.mkdir()
        assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:after") == 137
        _wait_for(lambda: len(world.applied(world.entries(tmp_path), "refund")) == 2, "the refunds in the world")
        watcher.send_signal(getattr(signal, stop))
        out, _ = watcher.communicate(timeout=30)
    text = err_path.read_text()
    assert watcher.returncode == 0, out + text
    assert [e["ref"] for e in world.applied(world.entries(tmp_path), "refund")] == ["B", "A"]
    assert "Traceback" not in text and "recovered 1" in out
    assert text.count("waiting for it to appear") == 1, text  # one line, not one per look
    # The daemon's undos ask the host's kill switch, which this test env re-roots (and says so once).
    said = [line for line in text.strip().splitlines() if not line.startswith("AGENT_SAGA_HOST_ROOT=")]
    assert said == [f"agent-saga recover: no log at {wal} yet: waiting for it to appear"], text
