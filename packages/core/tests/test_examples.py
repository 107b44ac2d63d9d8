"""Every example that needs only the core runs, and does what its docstring says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run(name: str, cwd: Path) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout


def test_quickstart_unwinds_cleanly_and_logs_it(tmp_path: Path) -> None:
    stdout = run("quickstart.py", tmp_path)
    assert "rollback of saga" in stdout and ": clean" in stdout
    records = [json.loads(x) for x in (tmp_path / "agent-saga.wal").read_text().splitlines()]
    compensated = [r["step"] for r in records if r["type"] == "STEP_COMPENSATED"]
    assert compensated == [2, 1]  # newest first
    assert any(r["type"] == "STEP_NOT_APPLIED" and r["step"] == 3 for r in records)
    assert records[-1]["type"] == "SAGA_ROLLED_BACK" and records[-1]["body"]["clean"] is True
