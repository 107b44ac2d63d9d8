"""Several daemon processes over one log: every compensation runs exactly once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import recovery_world as world
from recovery_checks import chain_ok, env_for, read_log, run_worker, wait_until_expired, world_counts

from agent_saga.recovery import fold

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process

SAGAS = 200


def start_daemon(world_dir: Path, wal: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal),
         "--import", "recovery_world", "--lease-grace", "0", "--quiet"],
        env=env_for(world_dir, role="daemon"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_four_daemons_racing_over_200_orphaned_sagas_refund_each_charge_once(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "many", str(SAGAS)) == 137
    charges = world.applied(world.entries(tmp_path), "charge")
    assert len(charges) == SAGAS
    wait_until_expired()

    daemons = [start_daemon(tmp_path, wal) for _ in range(4)]
    outputs = [d.communicate(timeout=300) for d in daemons]
    for daemon, (out, err) in zip(daemons, outputs, strict=True):
        assert daemon.returncode == 0, out + err

    items = world.entries(tmp_path)
    refunds = world.applied(items, "refund")
    assert sorted(e["ref"] for e in refunds) == sorted(e["ref"] for e in charges)
    # The strong claim: no refund was even *attempted* twice (not merely deduped remotely).
    attempts = world_counts(items, "attempt", role="daemon")
    assert len(attempts) == SAGAS
    assert set(attempts.values()) == {1}
    assert not [e for e in items if e["ev"] == "deduped"]
    shares = sorted(Counter(e["pid"] for e in refunds).values(), reverse=True)
    print(f"refunds per daemon: {shares}")

    records = read_log(wal)
    views = fold(records)
    assert all(v.ended == "SAGA_ROLLED_BACK" for v in views.values())
    assert sum(1 for r in records if r["type"] == "SAGA_ROLLED_BACK") == SAGAS
    assert sum(1 for r in records if r["type"] == "RECOVERY_CLAIMED") == SAGAS
    assert chain_ok(wal)
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(seqs) + 1))  # four appending processes, one sequence


def test_four_sequential_daemon_runs_issue_one_refund(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:B:after") == 137
    wait_until_expired()
    for _ in range(4):
        daemon = start_daemon(tmp_path, wal)
        out, err = daemon.communicate(timeout=120)
        assert daemon.returncode == 0, out + err
    items = world.entries(tmp_path)
    assert Counter(e["ref"] for e in world.applied(items, "refund")) == {"A": 1, "B": 1}
    assert set(world_counts(items, "attempt", role="daemon").values()) == {1}


def test_a_daemon_killed_mid_compensation_is_finished_by_the_next_with_the_same_key(tmp_path: Path) -> None:
    wal = tmp_path / "agent.wal"
    assert run_worker(wal, tmp_path, "three", RECOVERY_CRASH_EFFECT="charge:C:after") == 137
    wait_until_expired()
    env = env_for(tmp_path, role="daemon", RECOVERY_CRASH_EFFECT="refund:B:after")
    crashed = subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", "recovery_world",
         "--lease-grace", "0"], env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert crashed.returncode == 137  # died inside refund B, after it landed, holding the claim
    daemon = start_daemon(tmp_path, wal)
    out, err = daemon.communicate(timeout=120)
    assert daemon.returncode == 0, out + err

    items = world.entries(tmp_path)
    assert [e["ref"] for e in world.applied(items, "refund")] == ["C", "B", "A"]
    attempts = Counter(e["ref"] for e in items if e["ev"] == "attempt" and e["op"] == "refund")
    assert attempts == {"C": 1, "B": 2, "A": 1}  # B again, only because nobody saw it return
    keys_b = {e["key"] for e in items if e["op"] == "refund" and e["ref"] == "B"}
    assert len(keys_b) == 1  # ... and with the same key, so the remote side deduped it
    assert [e["ev"] for e in items if e["op"] == "refund" and e["ref"] == "B"] == [
        "attempt", "applied", "attempt", "deduped"]
    started = [r["body"]["attempt"] for r in read_log(wal) if r["type"] == "COMPENSATION_STARTED"
               and r["step"] == 2]
    assert started[-1] == 2
    assert fold(read_log(wal))[read_log(wal)[0]["saga"]].ended == "SAGA_ROLLED_BACK"
    assert chain_ok(wal)
