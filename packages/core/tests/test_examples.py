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


def test_small_model_big_docs_answers_fully_grounded_through_a_2000_token_window(tmp_path: Path) -> None:
    stdout = run("small_model_big_docs.py", tmp_path)
    assert "manual: 440,000 characters" in stdout and "host window: 2,000 tokens" in stdout
    assert "map:" in stdout and "reduce: 1 host call" in stdout and "total:" in stdout  # tokens per phase
    assert "the number 4300 is not in the summary's spans" in stdout  # the host's misreading was refused
    assert "4 of 4 claim(s) VERIFIED - fully grounded" in stdout and "fully grounded: True" in stdout
    log = tmp_path / "small_model_big_docs.wal"
    assert str(log) in stdout
    records = [json.loads(x) for x in log.read_text().splitlines()]
    (verdict,) = [r["body"] for r in records if r["type"] == "ANSWER_GROUNDED"]
    assert verdict["fully_grounded"] is True
    assert [c["status"] for c in verdict["claims"]] == ["VERIFIED"] * 4
    assert all(c["receipts"] and c["receipts"][0]["doc_id"] == "plant-manual" for c in verdict["claims"])
    assert "Crews " not in log.read_text()  # receipts, never the manual's text
    verified = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal", str(log)],
                              capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
