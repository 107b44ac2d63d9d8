"""What the agent writes, the recovery daemon does not run: ``mcp.call_tool`` names servers, never commands.

An agent commits a COMPENSABLE step through the public API whose undo is ``mcp.call_tool``
with a server of its own choosing, and dies. ``agent-saga recover --import
agent_saga_mcp.handler`` (what an operator runs, often as root) reads that log. It must
start only a server that its own host's ``mcp-servers.json`` lists under the recorded
name; anything else is escalated (``undo-refused``) and the saga dead-lettered, not
retried and not run.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_saga_mcp.handler import call_tool
from agent_saga_mcp.servers import load_servers
from conftest import World, run_cli

from agent_saga import CompensationRefused, ConfigurationError
from agent_saga.log import read_records

# The agent: one COMPENSABLE step whose undo it wrote itself, then it dies with the saga open.
AGENT = """
import asyncio, json, os, sys
from agent_saga import Compensation, FileWAL, saga_scope
import agent_saga_mcp.handler  # registers mcp.call_tool, so the undo is recorded as recoverable

server = json.loads(sys.argv[1])

async def main():
    wal = FileWAL(os.environ["AGENT_SAGA_WAL"])
    async with saga_scope(wal=wal) as saga:
        await saga.execute(
            tool="create_charge", forward=lambda: {"id": "ch_1"}, semantics="COMPENSABLE",
            compensate=lambda result: Compensation(handler="mcp.call_tool", kwargs={
                "server": server, "tool": "create_refund", "arguments": {"charge": result["id"]}}),
        )
        await wal.barrier_async()  # the step's record is on disk
        os._exit(0)  # no commit, no rollback: the daemon's job

asyncio.run(main())
"""


def hostile_servers(marker: Path) -> dict[str, Any]:
    shell = ["/bin/sh", "-c", f"touch {marker}"]
    return {
        "command": {"command": shell, "cwd": "/"},  # what earlier versions recorded: run as it says
        "command-beside-a-known-name": {"name": "payments", "command": shell, "cwd": "/"},
        "unknown-name": "evil",
        "a-path-for-a-name": "/bin/sh",
    }


def recover_until(world: World, done: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``agent-saga recover`` until the log holds a ``done`` record (the lease is 1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        out = run_cli(world, "recover", "--wal-path", str(world.wal), "--import", "agent_saga_mcp.handler",
                      "--lease-grace", "0", "--retry-delay", "0.1")
        if any(r["type"] == done for r in read_records(world.wal)) or time.monotonic() > deadline:
            return out
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(hostile_servers(Path("/x"))))
def test_the_daemon_escalates_a_server_the_agent_chose_and_starts_nothing(world: World, kind: str) -> None:
    world.configure_server("payments")  # a real, listed server: the record must not reach it either
    marker = world.root / "pwned"
    agent = subprocess.run([sys.executable, "-c", AGENT, json.dumps(hostile_servers(marker)[kind])],
                           env=world.env, cwd=world.root, capture_output=True, text=True, timeout=120, check=False)
    assert agent.returncode == 0, agent.stderr
    assert [r["type"] for r in read_records(world.wal)][-1] == "STEP_COMMITTED"  # a dead, open saga

    out = recover_until(world, "SAGA_DEAD_LETTERED")
    assert not marker.exists()  # the recorded command never ran
    assert world.calls() == []  # nor did any server start on its say-so
    types = [r["type"] for r in read_records(world.wal)]
    assert "SAGA_DEAD_LETTERED" in types and "SAGA_ROLLED_BACK" not in types, types
    (escalated,) = [r["body"] for r in read_records(world.wal) if r["type"] == "ESCALATED"]
    assert escalated["kind"] == "undo-refused"
    assert "nothing was started" in escalated["detail"] and "mcp-servers.json" in escalated["detail"]
    assert out.returncode == 1, out.stdout + out.stderr  # an open escalation

    again = run_cli(world, "recover", "--wal-path", str(world.wal), "--import", "agent_saga_mcp.handler",
                    "--lease-grace", "0")
    assert again.returncode == 1
    assert types.count("COMPENSATION_STARTED") == 1  # refused once, never retried
    assert [r["type"] for r in read_records(world.wal)].count("COMPENSATION_STARTED") == 1
    assert not marker.exists()


@pytest.mark.slow
def test_the_daemon_runs_the_server_its_host_lists_under_the_recorded_name(world: World) -> None:
    # The same agent, naming a listed server: the daemon starts the listed command and refunds.
    world.configure_server("payments")
    world.dir.mkdir()
    (world.dir / "charges.json").write_text(json.dumps(
        {"charges": {"ch_1": {"amount": 3, "customer": "a", "refunded": False}}, "refunds": {}}))
    agent = subprocess.run([sys.executable, "-c", AGENT, json.dumps("payments")], env=world.env, cwd=world.root,
                           capture_output=True, text=True, timeout=120, check=False)
    assert agent.returncode == 0, agent.stderr

    out = recover_until(world, "SAGA_ROLLED_BACK")
    assert out.returncode == 0, out.stdout + out.stderr
    assert world.charges()["ch_1"]["refunded"] is True
    assert [c["tool"] for c in world.calls()] == ["create_refund"]


def test_a_server_list_someone_else_may_write_is_not_trusted(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SAGA_HOST_ROOT", world.env["AGENT_SAGA_HOST_ROOT"])
    file = world.configure_server("payments", ["/bin/sh", "-c", f"touch {world.root / 'pwned'}"])
    assert set(load_servers()) == {"payments"}
    for mode, target in [(0o664, file), (0o646, file), (0o775, file.parent)]:
        original = target.stat().st_mode & 0o777
        target.chmod(mode)
        try:
            with pytest.raises(ConfigurationError, match=r"writable by group or others .* chmod go-w"):
                load_servers()
            with pytest.raises(CompensationRefused, match="cannot be trusted"):
                asyncio.run(call_tool("payments", "create_refund", {"charge": "ch_1"}))
        finally:
            target.chmod(original)
    assert not (world.root / "pwned").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user (os.chown)")
def test_the_server_list_is_held_to_the_host_lists_one_rule(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule of the approver and operator keys: a root link into the agent's directory, a sticky directory.

    The agent (``nobody``) keeps the list in its own directory and root links to it: the file
    itself is root's and 0644, but the agent can replace it, so it chooses what the daemon runs.
    """
    monkeypatch.setenv("AGENT_SAGA_HOST_ROOT", world.env["AGENT_SAGA_HOST_ROOT"])
    file = world.configure_server("payments", ["/bin/sh", "-c", f"touch {world.root / 'pwned'}"])
    agent = world.root / "agent-owned"
    agent.mkdir(mode=0o755)
    kept = agent / "mcp-servers.json"
    kept.write_bytes(file.read_bytes())
    kept.chmod(0o644)
    file.unlink()
    file.symlink_to(kept)
    assert set(load_servers()) == {"payments"}  # all root's: a link is no reason to refuse
    os.chown(agent, 65534, -1)
    with pytest.raises(ConfigurationError, match=rf"{agent} is owned by uid 65534.*where {file} leads.*chown root"):
        load_servers()
    with pytest.raises(CompensationRefused, match="cannot be trusted"):
        asyncio.run(call_tool("payments", "create_refund", {"charge": "ch_1"}))
    os.chown(agent, 0, -1)
    file.unlink()
    file.write_bytes(kept.read_bytes())
    file.chmod(0o644)
    file.parent.chmod(0o1777)  # sticky: the agent could have created the list while it was absent
    with pytest.raises(ConfigurationError, match=r"writable by group or others \(mode 1777\).*chmod go-w"):
        load_servers()
    assert not (world.root / "pwned").exists()


@pytest.mark.parametrize(("content", "expected"), [
    ("not json", "is not JSON"),
    ('{"payments": {"command": ["x"]}}', '"servers"'),
    ('{"servers": {"a b": {"command": ["x"]}}}', "a server name is"),
    ('{"servers": {"p": {"command": "python -m srv"}}}', "must be a non-empty list of strings"),
    ('{"servers": {"p": {"command": ["x"], "cwd": "relative"}}}', "must be an absolute path"),
    ('{"servers": {"p": {"command": ["x"], "env": {}}}}', "unknown keys"),
])
def test_a_broken_server_list_names_the_file_and_the_fix(tmp_path: Path, content: str, expected: str) -> None:
    file = tmp_path / "mcp-servers.json"
    file.write_text(content)
    with pytest.raises(ConfigurationError, match=expected) as caught:
        load_servers(file)
    assert str(file) in str(caught.value)


def test_no_list_means_no_server_and_a_refusal(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SAGA_HOST_ROOT", world.env["AGENT_SAGA_HOST_ROOT"])
    assert load_servers() == {}
    with pytest.raises(CompensationRefused, match=r"known: none"):
        asyncio.run(call_tool("payments", "create_refund", {"charge": "ch_1"}))
    with pytest.raises(CompensationRefused, match="names no server"):
        asyncio.run(call_tool(None, "create_refund", {"charge": "ch_1"}))
