"""`agent-saga demo` does what each act says, judged from its log and its world file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agent_saga.log import read_records

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process


def run_demo(directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", "demo", "--dir", str(directory), *extra],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_three_acts_happen_as_told(tmp_path: Path) -> None:
    proc = run_demo(tmp_path / "demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\033[" not in proc.stdout  # not a TTY: plain text
    records = list(read_records(tmp_path / "demo" / "agent-saga.wal"))
    world = [json.loads(x) for x in (tmp_path / "demo" / "agent-saga-demo.world.jsonl").read_text().splitlines()]
    by_saga: dict[str, list[dict[str, Any]]] = defaultdict(list)
    names: dict[str, str] = {}
    for r in records:
        by_saga[r["saga"]].append(r)
        if r["type"] == "SAGA_STARTED":
            names[r["saga"]] = r["body"]["name"]
    saga = {name: sid for sid, name in names.items()}

    # Act I: three effects undone newest-first, and the rollback recorded as clean.
    act1 = by_saga[saga["onboard-acme"]]
    assert [r["step"] for r in act1 if r["type"] == "STEP_COMPENSATED"] == [3, 2, 1]
    assert act1[-1]["type"] == "SAGA_ROLLED_BACK" and act1[-1]["body"]["clean"] is True

    # Act II: the wire was refused before it ran: no intent, and nothing in the world.
    wire = by_saga[saga["pay-supplier"]]
    assert [r["type"] for r in wire if r["type"].startswith("STEP_")] == ["STEP_REFUSED"]
    assert not any("wire" in e["target"] for e in world)
    runaway = by_saga[saga["runaway-agent"]]
    assert sum(r["type"] == "STEP_COMMITTED" for r in runaway) == 5
    assert runaway[-1]["body"]["clean"] is True

    # Act III: the killed worker's charge was refunded exactly once, by the daemon.
    worker = by_saga[saga["checkout-worker"]]
    types = [r["type"] for r in worker]
    assert "STEP_COMMITTED" not in types  # it died inside the call
    assert types.count("STEP_COMPENSATED") == 1 and "RECOVERY_CLAIMED" in types
    refunds = [e for e in world if e["op"] == "undo" and "worker" in e["target"]]
    assert sum(e["applied"] for e in refunds) == 1

    # Nothing is left standing, and the log verifies.
    verify = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path",
                             str(tmp_path / "demo" / "agent-saga.wal")], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_logs_flag_prints_the_engine_trace(tmp_path: Path) -> None:
    proc = run_demo(tmp_path / "demo", "--logs", "--no-color")
    assert proc.returncode == 0
    assert "[log]" in proc.stdout and "STEP_INTENT" in proc.stdout and "RECOVERY_CLAIMED" in proc.stdout


def _tree(directory: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None
            for p in sorted(directory.rglob("*"))}


@pytest.mark.parametrize("existing", ["agent-saga.wal", "agent-saga-demo.world.jsonl", "agent-saga.wal.recovery"])
def test_a_file_of_the_user_in_the_demo_directory_is_refused_and_left_as_it_was(
    tmp_path: Path, existing: str
) -> None:
    directory = tmp_path / "mine"
    directory.mkdir()
    if existing.endswith(".recovery"):
        (directory / existing).mkdir()
        (directory / existing / "ledger.jsonl").write_text('{"mine": true}\n')
    else:
        (directory / existing).write_text("my own records\n")
    before = _tree(directory)

    proc = run_demo(directory)

    assert proc.returncode == 2, proc.stdout + proc.stderr  # a usage error: nothing ran
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert existing in proc.stderr and "--force" in proc.stderr and "--dir" in proc.stderr
    assert _tree(directory) == before


def test_force_replaces_an_earlier_run_and_nothing_else(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    assert run_demo(directory).returncode == 0
    (directory / "notes.txt").write_text("not the demo's\n")

    again = run_demo(directory)
    assert again.returncode == 2 and "--force" in again.stderr

    forced = run_demo(directory, "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    names = [r["body"]["name"] for r in read_records(directory / "agent-saga.wal") if r["type"] == "SAGA_STARTED"]
    assert sorted(names) == ["checkout-worker", "onboard-acme", "pay-supplier", "runaway-agent"]  # one run
    world = [json.loads(x) for x in (directory / "agent-saga-demo.world.jsonl").read_text().splitlines()]
    assert sum(e["op"] == "create" and e["target"] == "instance i-0abc" for e in world) == 1
    assert (directory / "notes.txt").read_text() == "not the demo's\n"


def test_bare_demo_then_the_seeds_next_command_and_every_printed_command_run(tmp_path: Path) -> None:
    # The seed: `agent-saga demo`, then `agent-saga graph --wal ./agent-saga.wal`. With no
    # --dir the demo's log is the default log of the directory it ran in.
    env = {k: v for k, v in os.environ.items() if k != "AGENT_SAGA_WAL"}
    bindir = Path(sys.executable).parent
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    demo = subprocess.run([sys.executable, "-m", "agent_saga", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (tmp_path / "agent-saga.wal").is_file()

    seed = subprocess.run(["agent-saga", "graph", "--wal", "./agent-saga.wal"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert seed.returncode == 0, seed.stderr
    assert seed.stdout.startswith("flowchart") and "onboard-acme" in seed.stdout

    lines = demo.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("next")) + 1
    commands = [line.strip() for line in lines[start:]]
    assert commands and all(c.startswith("agent-saga ") for c in commands), lines[start - 1:]
    assert any(c.startswith("agent-saga graph --wal ./agent-saga.wal") for c in commands)
    for command in commands:  # exactly as printed, comment and all, through a shell
        ran = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=60, check=False)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    animation = (tmp_path / "rollback.svg").read_text()
    assert "onboard-acme" in animation  # Act I, as the line says
