"""Every example that needs only the core runs, and does what its docstring says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    assert "the number 4300 kPa is not in the summary's spans" in stdout  # the host's misreading was refused
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


def test_multi_domain_unwinds_four_systems_newest_first_when_the_fifth_fails(tmp_path: Path) -> None:
    stdout = run("multi_domain.py", tmp_path)
    assert ": clean" in stdout and "4 compensated" in stdout
    assert "left standing: nothing" in stdout
    log = tmp_path / "multi_domain.wal"
    assert f"log: {log}" in stdout
    records = [json.loads(x) for x in log.read_text().splitlines()]
    compensated = [(r["step"], r["body"].get("handler")) for r in records if r["type"] == "STEP_COMPENSATED"]
    assert [step for step, _ in compensated] == [4, 3, 2, 1]  # newest first
    started = [r["body"]["tool"] for r in records if r["type"] == "STEP_INTENT"]
    assert started == ["payments.charge", "crm.create_account", "tickets.open", "infra.create_server",
                       "messages.send_sms"]  # five systems, one saga
    assert len({r["saga"] for r in records}) == 1
    assert any(r["type"] == "STEP_NOT_APPLIED" and r["step"] == 5 for r in records)
    assert records[-1]["type"] == "SAGA_ROLLED_BACK" and records[-1]["body"]["clean"] is True
    verified = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal", str(log)],
                              capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_chaos_demo_optimistic_leaves_orphans_and_transactional_none_after_a_real_kill(tmp_path: Path) -> None:
    stdout = run("chaos_demo.py", tmp_path)  # exit 0: the script's own verdict agrees
    assert stdout.count("killed with SIGKILL during order-3") == 2  # the same kill in both runs

    def world(mode: str) -> list[dict[str, Any]]:
        path = tmp_path / "chaos_demo" / mode / "world.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()]

    def standing(events: list[dict[str, Any]]) -> set[str]:
        alive: dict[str, bool] = {}
        for e in events:
            if e["applied"]:
                alive[e["target"]] = e["op"] == "create"
        return {t for t, up in alive.items() if up}

    order_1 = {"charge order-1", "server order-1", "ticket order-1"}  # the order that completed
    assert standing(world("optimistic")) == order_1 | {"server order-2", "charge order-3", "server order-3"}
    transactional = world("transactional")
    assert standing(transactional) == order_1
    undone = [e["target"] for e in transactional if e["op"] == "undo" and e["applied"]]
    assert sorted(undone) == sorted(set(undone))  # each undo applied once
    assert {"server order-2", "charge order-2", "charge order-3", "server order-3"} <= set(undone)

    records = [json.loads(x) for x in (tmp_path / "chaos_demo" / "transactional" / "agent-saga.wal").read_text().splitlines()]
    names = {r["saga"]: r["body"]["name"] for r in records if r["type"] == "SAGA_STARTED"}
    killed = [r for r in records if names.get(r["saga"]) == "order-3"]
    types = [r["type"] for r in killed]
    assert "RECOVERY_CLAIMED" in types  # the daemon, not the dead agent, finished it
    assert killed[-1]["type"] == "SAGA_ROLLED_BACK" and killed[-1]["body"]["clean"] is True
    lost = [r for r in records if names.get(r["saga"]) == "order-2"]
    assert any(r["type"] == "STEP_UNKNOWN" and r["step"] == 2 for r in lost)  # the timed-out server call
    assert lost[-1]["type"] == "SAGA_ROLLED_BACK" and lost[-1]["body"]["clean"] is True
