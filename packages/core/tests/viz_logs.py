"""Logs for the picture and debugger tests, written by the real engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent_saga import Compensation, FileWAL, RetryPolicy, SagaAborted, compensator, saga_scope
from agent_saga.registry import unregister

DEMO_TOOLS = ("aws.run_instances", "pinecone.create_namespace", "jira.create_issue", "aws.configure_region",
              "bank.wire", "stripe.charge")


def run_demo(directory: Path) -> Path:
    """Run `agent-saga demo` for real into ``directory``; returns its log."""
    env = dict(os.environ, AGENT_SAGA_HOME=str(directory / ".home"))
    env.pop("AGENT_SAGA_WAL", None)
    proc = subprocess.run([sys.executable, "-m", "agent_saga", "demo", "--dir", str(directory)], env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return directory / "agent-saga.wal"


def write_mixed_log(path: Path) -> Path:
    """Sagas of every kind: a clean unwind, a failed undo with unresolved steps, an orphan,
    a completed saga, and an open one (no end record)."""

    @compensator("viz.undo")
    def undo(x: str) -> None: ...

    def refund_down(x: str) -> None:
        raise ConnectionError("refund service down")

    ok = lambda r: Compensation(fn=undo, handler="viz.undo", kwargs={"x": "a"})
    wal = FileWAL(path)
    try:
        try:
            with saga_scope(wal, name="clean-one") as s:
                s.execute(tool="cloud.create", semantics="COMPENSABLE", forward=lambda: 1, compensate=ok)
                raise RuntimeError("model said \"no\" <stop>")
        except SagaAborted:
            pass
        try:
            with saga_scope(wal, name="partial", compensation_retry=RetryPolicy(1)) as s:
                s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: 1, compensate=ok)
                s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: 1)
                s.execute(tool="crm.update", semantics="COMPENSABLE", forward=lambda: 1,
                          compensate=lambda r: Compensation(fn=refund_down, kwargs={"x": "b"}))
                raise RuntimeError("late failure")
        except SagaAborted:
            pass
        try:
            with saga_scope(wal, name="orphan") as s:
                s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: 1)
                raise RuntimeError("after the mail")
        except SagaAborted:
            pass
        with saga_scope(wal, name="fine") as s:
            s.execute(tool="read.docs", semantics="REVERSIBLE", forward=lambda: 1)
        wal.append("SAGA_STARTED", "open-saga-id", {"name": "crashed"})
        wal.append("STEP_INTENT", "open-saga-id", {"tool": "pay.charge", "semantics": "COMPENSABLE"}, step=1)
    finally:
        wal.close()
        unregister("viz.undo")
    return path
