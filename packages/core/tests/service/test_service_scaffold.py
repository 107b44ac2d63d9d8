"""agent-saga new (its pytest passes on day one) and agent-saga doctor (exit 1, each blocker named)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_saga import FileWAL, saga_scope
from agent_saga.cli.doctor import BLOCKER, diagnose
from agent_saga.cli.main import main

CLI = [sys.executable, "-m", "agent_saga"]


def clean_env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_SAGA_WAL", "AGENT_SAGA_SWITCH", "PYTHONPATH")}
    return {**env, **more}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("new")
    made = subprocess.run([*CLI, "new", "myagent"], cwd=parent, env=clean_env(), capture_output=True, text=True,
                          check=False)
    assert made.returncode == 0, made.stderr
    assert "created myagent/ (11 files)" in made.stdout
    return parent / "myagent"


@pytest.mark.slow
def test_the_new_projects_pytest_passes_on_day_one(project: Path, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
        env=clean_env(AGENT_SAGA_HOST_ROOT=str(tmp_path / "host")), capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5 passed" in run.stdout  # including the rollback proof through the pytest plugin


def test_the_scaffold_is_small_and_decides_nothing_it_cannot(project: Path) -> None:
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == ["Dockerfile", "README.md", "compose.yaml", "myagent/__init__.py", "myagent/app.py",
                     "myagent/settings.py", "myagent/tools.py", "myagent/workflow.py", "pyproject.toml",
                     "tests/test_rollback.py", "tests/test_service.py"]
    for path in project.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")
    assert "ENV AGENT_SAGA_WAL" not in (project / "Dockerfile").read_text()  # no default log
    assert '"agent-saga[fastapi]>=3.0.0.dev0,<4"' in (project / "pyproject.toml").read_text()


def test_doctor_with_three_replicas_exits_1_and_names_each_blocker(project: Path) -> None:
    run = subprocess.run([*CLI, "doctor", "--replicas", "3", "--json"], cwd=project, env=clean_env(),
                         capture_output=True, text=True, check=False)
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    blockers = [(f["check"], f["message"].split(":")[0]) for f in report["findings"] if f["level"] == BLOCKER]
    assert blockers == [
        ("log", "no saga log is chosen (AGENT_SAGA_WAL is not set)"),
        ("kill_switch", "the kill switch is each host's /var/lib/agent-saga/switch.json"),
        ("todo", "compose.yaml"),
        ("todo", "myagent/app.py"),
        ("todo", "myagent/tools.py"),
    ]
    assert all(f["fix"] for f in report["findings"])
    text = subprocess.run([*CLI, "doctor", "--replicas", "3"], cwd=project, env=clean_env(),
                          capture_output=True, text=True, check=False)
    assert text.returncode == 1
    assert text.stdout.splitlines()[-1] == "5 blocker(s), 0 warning(s) for 3 replica(s)"


def test_once_decided_doctor_passes(project: Path, tmp_path: Path) -> None:
    decided = tmp_path / "decided"
    for path in project.rglob("*"):
        if path.is_file():
            target = decided / path.relative_to(project)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text().replace("TODO(agent-saga)", "decided"))
    log = tmp_path / "data" / "agent-saga.wal"
    log.parent.mkdir()
    with FileWAL(log) as wal, saga_scope(wal) as s:
        s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1, args={"api_key": "sk_live_redactedbyname1"})
    env = {"AGENT_SAGA_WAL": str(log), "AGENT_SAGA_SWITCH": "redis://switch.internal:6379/0"}
    findings = diagnose(decided, 3, env)
    assert [(f.check, f.level) for f in findings] == [("log", "WARNING")]  # a file log and 3 replicas
    assert diagnose(decided, 1, env) == []


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def messages(root: Path, replicas: int = 1, **env: str) -> list[str]:
    return [f"{f.check}: {f.message}" for f in diagnose(root, replicas, {"AGENT_SAGA_WAL": "x.wal", **env})
            if f.level == BLOCKER]


def test_an_in_memory_log_and_per_process_limits(tmp_path: Path) -> None:
    root = write(tmp_path, {"svc/__init__.py": "", "svc/run.py": """
        import agent_saga as saga
        from agent_saga import BudgetLimit, PreFlightGate

        gate = PreFlightGate(limits=[BudgetLimit("spend", max_total=500, window=3600)])
        wal = saga.MemoryWAL()
    """})
    assert messages(root) == ["log: svc/run.py:6 builds a MemoryWAL: a crash loses every open saga's undo, "
                              "and no recovery daemon can finish them"]
    fleet = messages(root, 3, AGENT_SAGA_SWITCH="redis://r:6379/0")
    assert "limits: svc/run.py:5 sets a limit, and no shared limit store is configured: 3 replicas may spend " \
           "3 times it" in fleet
    (root / "svc/store.py").write_text("from agent_saga import RedisLimitStore, set_limit_store\n"
                                       "set_limit_store(RedisLimitStore('redis://r:6379/1'))\n")
    assert not [m for m in messages(root, 3, AGENT_SAGA_SWITCH="redis://r:6379/0") if m.startswith("limits")]


def test_undos_the_daemon_would_not_import_and_undos_never_declared(tmp_path: Path) -> None:
    root = write(tmp_path, {"svc/__init__.py": "", "svc/app.py": """
        from fastapi import FastAPI
        from agent_saga import saga_lifespan
        from . import tools

        app = FastAPI(lifespan=saga_lifespan("x.wal"))
    """, "svc/tools.py": """
        from agent_saga import compensator, tool

        @compensator("svc.refund")
        def refund(charge_id): ...

        @tool(semantics="COMPENSABLE", compensate=lambda r: {"handler": "svc.void", "kwargs": {}})
        def charge(): ...
    """, "svc/undo_later.py": """
        import agent_saga

        @agent_saga.compensator("svc.cancel")
        def cancel(order): ...
    """})
    found = messages(root)
    assert found == [
        "handlers: svc/tools.py:7 names the undo 'svc.void', and no @compensator of that name is declared in "
        "the project",
        "handlers: 'svc.cancel' declared in svc.undo_later (svc/undo_later.py), which the app never imports: "
        "after a crash the recovery daemon cannot run it, and the saga is held instead of undone",
    ]
    (root / "svc/app.py").write_text((root / "svc/app.py").read_text().replace(
        'saga_lifespan("x.wal")', 'saga_lifespan("x.wal", handlers=["svc.undo_later"])'))
    assert len(messages(root)) == 1  # only the undo nobody declared is left


def test_the_log_file_others_can_read_unchained_or_holding_secrets(tmp_path: Path) -> None:
    root = write(tmp_path, {"svc.py": "x = 1\n"})
    chained = tmp_path / "chained.wal"
    with FileWAL(chained) as wal, saga_scope(wal) as s:
        s.execute(tool="crm.note", semantics="REVERSIBLE", forward=lambda: 1,
                  args={"text": "sk_live_abcdefgh12345678"})
    assert messages(root, AGENT_SAGA_WAL=str(chained)) == [
        f"secrets: {chained}: record seq 2 body['args']['text'] holds a value shaped like a secret key or token, stored in clear",
    ]
    chained.chmod(0o644)
    assert f"permissions: {chained} is readable or writable by others (mode 0644): it holds every saga's " \
           "arguments and undos" in messages(root, AGENT_SAGA_WAL=str(chained))

    unchained = tmp_path / "unchained.wal"
    with FileWAL(unchained, chain=False) as wal, saga_scope(wal) as s:
        s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1)
    assert [m.split(":")[0] for m in messages(root, AGENT_SAGA_WAL=str(unchained))] == ["chain"]


def test_an_encrypted_log_holds_no_secret_in_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_saga.log.crypto import generate_key

    monkeypatch.setenv("AGENT_SAGA_WAL_KEY", generate_key())
    root = write(tmp_path, {"svc.py": "x = 1\n"})
    log = tmp_path / "sealed.wal"
    with FileWAL(log) as wal, saga_scope(wal) as s:
        s.execute(tool="crm.note", semantics="REVERSIBLE", forward=lambda: 1, args={"text": "sk_live_abcdefgh12345678"})
    monkeypatch.delenv("AGENT_SAGA_WAL_KEY")  # doctor needs no key to tell the body is sealed
    assert messages(root, AGENT_SAGA_WAL=str(log)) == []


@pytest.mark.parametrize(("wal", "expected"), [
    ("postgresql://db/agents", "its driver (psycopg) is not installed"),  # the service env has no [postgres]
    ("ftp://host/log", "ftp:// names no log backend"),
])
def test_a_log_url_this_install_cannot_open(tmp_path: Path, wal: str, expected: str) -> None:
    [message] = messages(write(tmp_path, {"svc.py": ""}), AGENT_SAGA_WAL=wal)
    assert expected in message


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--replicas", "0"]) == 2
    assert main(["new", "1st-agent", "--dir", str(tmp_path)]) == 2
    assert main(["new", "json", "--dir", str(tmp_path)]) == 2  # would shadow the standard library's json
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["new", "taken", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot name a Python package" in err and "would shadow the module 'json'" in err
    assert "already exists and is not an empty directory" in err
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_doctor_after_the_demo_warns_on_this_machine_and_blocks_a_deployment(tmp_path: Path) -> None:
    demo = subprocess.run([*CLI, "demo"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False)
    assert demo.returncode == 0, demo.stderr
    here = subprocess.run([*CLI, "doctor", "--json"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                          check=False)
    assert here.returncode == 0, here.stdout  # a warning, not a blocker, where the demo just ran
    (log,) = [f for f in json.loads(here.stdout)["findings"] if f["check"] == "log"]
    assert log["level"] == "WARNING" and "agent-saga doctor --deploy" in log["fix"]
    for flags in (["--deploy"], ["--replicas", "2"]):
        deploy = subprocess.run([*CLI, "doctor", "--json", *flags], cwd=tmp_path, env=clean_env(),
                                capture_output=True, text=True, check=False)
        assert deploy.returncode == 1, flags
        (log,) = [f for f in json.loads(deploy.stdout)["findings"] if f["check"] == "log"]
        assert log["level"] == BLOCKER and log["message"].startswith("no saga log is chosen"), flags
