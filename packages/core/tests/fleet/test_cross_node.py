"""Nodes A, B and C (separate directories, HOMEs, processes) over one shared log.

A worker on node A dies between steps; recovery daemons on nodes B and C (the real
``agent-saga recover --watch``) sweep the shared log at the same time. Each undo must
run exactly once, newest first, judged by the outside world (recovery_world), which
records every call, so "the second call was never made" is checked, not just the balance.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_saga.audit import certify, verify_records
from agent_saga.log.resolve import open_log

HERE = Path(__file__).parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS))

import recovery_world as world  # noqa: E402

pytestmark = pytest.mark.slow


def node_env(root: Path, name: str, world_dir: Path) -> tuple[Path, dict[str, str]]:
    home = root / name / "home"
    home.mkdir(parents=True)
    env = {
        **os.environ, "HOME": str(home), "AGENT_SAGA_HOME": str(home / ".agent-saga"),
        "RECOVERY_WORLD": str(world_dir), "RECOVERY_ROLE": name, "AGENT_SAGA_LEASE_TTL": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return root / name, env


def test_two_daemons_on_two_nodes_undo_node_a_s_saga_once_newest_first(url: str, tmp_path: Path) -> None:
    world_dir = tmp_path / "world"
    world_dir.mkdir()
    a_dir, a_env = node_env(tmp_path, "node-a", world_dir)
    died = subprocess.run([sys.executable, str(HERE / "node.py"), "worker", url], cwd=a_dir, env=a_env,
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == 137, died.stderr
    saga_id = died.stdout.strip()
    with open_log(url) as wal:
        before = [r for r in wal.records() if r["saga"] == saga_id]
    assert [r["type"] for r in before].count("STEP_COMMITTED") == 3
    assert not any(r["type"].startswith("SAGA_ROLLED") for r in before)

    daemons = []
    for name in ("node-b", "node-c"):
        directory, env = node_env(tmp_path, name, world_dir)
        env["RECOVERY_EFFECT_DELAY"] = "0.4"  # slow undos: the two daemons are surely at work together
        daemons.append(subprocess.Popen(
            [sys.executable, "-m", "agent_saga", "recover", "--wal-path", url, "--watch",
             "--interval", "0.1", "--lease-grace", "0", "--import", "recovery_world"],
            cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open_log(url) as wal:
                records = list(wal.records())
            if any(r["saga"] == saga_id and r["type"] == "SAGA_ROLLED_BACK" for r in records):
                break
            time.sleep(0.2)
        else:
            pytest.fail("no daemon rolled the saga back within 60 s")
        time.sleep(1.0)  # give a second daemon every chance to (wrongly) act again
    finally:
        outputs = []
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            out, err = d.communicate(timeout=30)
            outputs.append(out + err)
    with open_log(url) as wal:
        records = list(wal.records())
    mine = [r for r in records if r["saga"] == saga_id]

    calls = [e for e in world.entries(world_dir) if e["role"] in ("node-b", "node-c")]
    # Every undo was *called* once (not merely applied once thanks to the provider's dedup) ...
    assert [(e["ev"], e["op"], e["ref"]) for e in calls] == [
        ("attempt", "refund", "B"), ("applied", "refund", "B"),
        ("attempt", "release", "R1"), ("applied", "release", "R1"),
        ("attempt", "refund", "A"), ("applied", "refund", "A"),
    ], outputs  # ... newest first
    assert [r["type"] for r in mine].count("RECOVERY_CLAIMED") == 1
    assert [r["type"] for r in mine].count("STEP_COMPENSATED") == 3
    ended = [r for r in mine if r["type"] == "SAGA_ROLLED_BACK"]
    assert len(ended) == 1 and ended[0]["body"]["clean"] is True
    assert verify_records(records).status == "intact"
    assert certify(records).certified
    # Both daemons really ran against the shared log (each printed its sweeps' summary or actions).
    assert all(d.returncode == 0 for d in daemons), outputs
