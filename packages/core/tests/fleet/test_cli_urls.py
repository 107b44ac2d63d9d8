"""Every verb that takes --wal-path takes a server log's URL, and 4 processes x 100 durable steps on one PostgresWAL.

The CLI is run as users run it (``python -m agent_saga``), in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from agent_saga import ActionSemantics, Compensation, SagaAborted, saga_scope
from agent_saga.log.resolve import open_log

HERE = Path(__file__).parent
C = ActionSemantics.COMPENSABLE


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def _orders(url: str) -> str:
    with open_log(url) as wal:
        with saga_scope(wal, name="order") as s:
            s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 1},
                      compensate=lambda r: Compensation(fn=lambda: None, description="undo"))
        with pytest.raises(SagaAborted), saga_scope(wal, name="undone") as s:
            undone = s.saga_id
            s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 2},
                      compensate=lambda r: Compensation(fn=lambda: None, description="undo"))
            raise RuntimeError("model gave up")
    return undone


def test_read_verbs_take_a_url(url: str, tmp_path: Path) -> None:
    undone = _orders(url)
    verified = cli("verify", "--wal-path", url, "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["status"] == "intact"
    certified = cli("certify", "--wal-path", url, "--json")
    assert certified.returncode == 0, certified.stderr
    assert json.loads(certified.stdout)["effects"] == 2
    exported = cli("export", "--wal-path", url, "--out", str(tmp_path / "bundle"))
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["source"] == url and manifest["record_count"] > 0
    graph = cli("graph", "--wal", url, "--saga", undone[:8])
    assert graph.returncode == 0 and "db.insert" in graph.stdout, graph.stderr
    for kind in ("fleet", "chain"):
        viz = cli("viz", "--wal", url, "--kind", kind)
        assert viz.returncode == 0 and viz.stdout.startswith("<svg"), viz.stderr
    animated = cli("animate", "--wal", url)
    assert animated.returncode == 0 and "<svg" in animated.stdout, animated.stderr
    escalations = cli("escalations", "--wal-path", url)
    assert escalations.returncode == 0 and "0 open escalation(s)" in escalations.stdout, escalations.stderr
    recovered = cli("recover", "--wal-path", url)
    assert recovered.returncode == 0 and "0 open saga(s)" in recovered.stdout, recovered.stderr


def test_ui_shows_a_server_log(url: str) -> None:
    undone = _orders(url)
    cmd = [sys.executable, "-m", "agent_saga", "ui", "--wal-path", url, "--port", "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert " at http://" in line, line
            base = line.split(" at ")[1].split()[0]
            with urllib.request.urlopen(base + "api/runs", timeout=60) as answer:
                assert undone in answer.read().decode()
        finally:
            proc.terminate()
            proc.wait(20)


def test_a_missing_or_unreachable_server_log_is_exit_3_in_one_line(url: str) -> None:
    missing = url.replace("log=", "log=never-written-")
    for verb in ("verify", "certify", "recover", "escalations"):
        done = cli(verb, "--wal-path", missing)
        assert done.returncode == 3, (verb, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "never-written-" in done.stderr, done.stderr
    unreachable = "redis://127.0.0.1:1/0" if url.startswith("redis") else "postgresql://postgres@127.0.0.1:1/postgres"
    done = cli("verify", "--wal-path", unreachable)
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr


def test_four_processes_by_a_hundred_durable_steps_on_one_postgres_log(pg: str, tmp_path: Path) -> None:
    url = f"{pg}?log=x400-{uuid.uuid4().hex[:12]}"  # not the pid: pids recycle, and the server keeps old logs
    env = {**os.environ, "RECOVERY_WORLD": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "node.py"), "steps", url, "100", f"p{n}"],
                              env=env, stderr=subprocess.PIPE, text=True) for n in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with open_log(url) as wal:
        records = list(wal.records())
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(records) + 1))  # no gap, no duplicate
    intents = [r for r in records if r["type"] == "STEP_INTENT"]
    assert len(intents) == 400
    assert len({(r["saga"], r["step"]) for r in intents}) == 400
    verified = cli("verify", "--wal-path", url, "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["status"] == "intact", verified.stdout
    certified = cli("certify", "--wal-path", url, "--json")
    cert = json.loads(certified.stdout)
    assert certified.returncode == 0 and cert["certified"], certified.stdout
    assert cert["sagas"] == 400 and cert["effects"] == 400 and cert["accounted"] == 400


def test_recording_verbs_write_to_a_server_log_and_resolve_saga_ids_against_it(url: str, tmp_path: Path) -> None:
    import time

    from agent_saga import FileApprovalStore
    from agent_saga.approvals._entry import new_entry
    from agent_saga.engine.ports import StepRequest
    from agent_saga.gate import ApprovalRequest
    from agent_saga.log.server import LogNotFound

    with open_log(url) as wal:
        for saga in ("abc-1", "abc-2", "xyz-9"):
            wal.append("SAGA_STARTED", saga, {"name": "n"})
    switch = ("--reason", "r", "--by", "soc@corp", "--store", str(tmp_path / "switch.json"))
    ambiguous = cli("quarantine", "abc", *switch, "--wal-path", url)
    assert ambiguous.returncode == 2 and "abc-1" in ambiguous.stderr and "abc-2" in ambiguous.stderr
    frozen = cli("quarantine", "xy", *switch, "--wal-path", url)
    assert frozen.returncode == 0 and "xyz-9" in frozen.stdout, frozen.stderr

    store = FileApprovalStore(tmp_path / "approvals")
    step = StepRequest("abc-1", 1, "wire.send", ActionSemantics.IRREVERSIBLE, {"amount": 5}, frozenset())
    entry, _ = store.create(new_entry(ApprovalRequest(step, "irreversible", "cannot be undone"), time.time(), 900.0,
                                      ((("@oncall",), 0.0),)))
    denied = cli("approvals", "deny", entry.id[:8], "--approver", "risk@corp", "--store", str(store.path),
                 "--wal-path", url)
    assert denied.returncode == 0, denied.stderr

    with open_log(url, create=False) as wal:
        recorded = [(r["type"], r["saga"]) for r in wal.records() if r["type"] != "SAGA_STARTED"]
    assert recorded == [("SWITCH_QUARANTINED", "xyz-9"), ("APPROVAL_DENIED", "abc-1")]

    # A default log that does not exist is never created, on a server either; a saga id
    # cannot be checked against it.
    unwritten = url.replace("log=", "log=never-written-")
    env = {**os.environ, "AGENT_SAGA_WAL": unwritten}
    halted = cli("halt", "--scope", "tool:wire.send", *switch, env=env)
    assert halted.returncode == 0 and "not logged" in halted.stderr, halted.stderr
    unchecked = cli("quarantine", "abc", *switch, env=env)
    assert unchecked.returncode == 3 and "no log at" in unchecked.stderr, unchecked.stderr
    with pytest.raises(LogNotFound):
        open_log(unwritten, create=False)


def test_reconcile_takes_a_url(url: str) -> None:
    _orders(url)
    # No reconciler is registered for db.insert: unverifiable, never counted as confirmed (exit 3).
    done = cli("reconcile", "--wal-path", url, "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["chain"] == "intact" and report["sagas"] == 2 and report["log"] == url, report
