"""Shared helpers: the test server's world, a real stdio MCP client, the proxy's command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from agent_saga.log import read_records

try:  # 1.x name
    from mcp.shared.exceptions import McpError
except ImportError:  # 2.x renamed it
    from mcp.shared.exceptions import MCPError as McpError  # type: ignore[no-redef,attr-defined]

__all__ = [
    "BIN",
    "POLICY",
    "SEED_ENFORCE",
    "SERVER",
    "SERVERS",
    "McpError",
    "World",
    "connect",
    "encode",
    "error_flag",
    "exchange",
    "run_cli",
    "structured",
    "types_of",
    "write_policy",
]

# No timing in the property tests (as packages/core/tests/hypothesis_profiles.py): Hypothesis's default
# 200 ms deadline per example and its too_slow health check fail a test on a loaded CI machine (one
# descheduled example is DeadlineExceeded, then Flaky) with nothing wrong in the code.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")

SERVERS = Path(__file__).parent / "servers"
BIN = Path(sys.executable).parent

sys.path.insert(0, str(SERVERS))  # my_mcp_server, for the in-memory client tests

SERVER = ["python", "-m", "my_mcp_server"]
SEED_ENFORCE = ["agent-saga", "mcp", "--policy", "saga-policy.json", "--", "python", "-m", "my_mcp_server"]
POLICY: dict[str, Any] = {
    "mode": "enforce",
    "tools": {
        "create_charge": {
            "semantics": "COMPENSABLE",
            "compensate": {"tool": "create_refund", "args": {"charge": "$.id"}},
            "policy_args": {"spent": "$.amount"},
        },
        "create_refund": {"semantics": "IRREVERSIBLE"},
        "search_docs": {"semantics": "REVERSIBLE"},
    },
}


class World:
    """The test server's files, and the environment every process of a test runs with."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "world"
        self.wal = root / "agent-saga.wal"
        self.env = {
            **os.environ,
            "MY_MCP_WORLD": str(self.dir),
            "PYTHONPATH": os.pathsep.join([str(SERVERS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            # `python` and `agent-saga` on the seed's command lines are this venv's.
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
            "AGENT_SAGA_LEASE_TTL": "1",
            "AGENT_SAGA_WAL": str(self.wal),
            "AGENT_SAGA_SWITCH": str(root / "switch.json"),
            # This test's own /etc/agent-saga (the MCP server list, approver keys) and kill switch.
            "AGENT_SAGA_HOST_ROOT": str(root / "host"),
        }

    @property
    def servers_file(self) -> Path:
        return self.root / "host" / "etc" / "agent-saga" / "mcp-servers.json"

    def configure_server(self, name: str = "payments", command: list[str] = SERVER) -> Path:
        """List ``command`` (run in this world's root) under ``name`` in this world's mcp-servers.json."""
        file = self.servers_file
        file.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        servers = json.loads(file.read_text())["servers"] if file.exists() else {}
        servers[name] = {"command": command, "cwd": str(self.root)}
        file.write_text(json.dumps({"servers": servers}))
        file.chmod(0o644)
        return file

    def calls(self) -> list[dict[str, Any]]:
        """Every tool call the server itself received."""
        path = self.dir / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def called(self) -> list[str]:
        return [c["tool"] for c in self.calls()]

    def charges(self) -> dict[str, Any]:
        path = self.dir / "charges.json"
        return json.loads(path.read_text())["charges"] if path.exists() else {}


@pytest.fixture
def world(tmp_path: Path) -> World:
    assert shutil.which("agent-saga", path=str(BIN)), "the agent-saga console script is not installed here"
    return World(tmp_path)


@asynccontextmanager
async def connect(command: list[str], world: World) -> AsyncIterator[ClientSession]:
    """A real MCP client (the SDK's stdio client) talking to ``command``."""
    params = StdioServerParameters(command=command[0], args=command[1:], env=world.env, cwd=str(world.root))
    with open(world.root / "client-stderr.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def error_flag(result: Any) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def structured(result: Any) -> Any:
    value = getattr(result, "structured_content", None)
    return value if value is not None else getattr(result, "structuredContent", None)


def write_policy(world: World, policy: dict[str, Any] = POLICY, name: str = "saga-policy.json") -> Path:
    path = world.root / name
    path.write_text(json.dumps(policy))
    return path


def types_of(world: World) -> list[str]:
    return [r["type"] for r in read_records(world.wal)] if world.wal.exists() else []


def run_cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    # No client on stdin: a proxy that cannot start answers a client's first request, and here
    # it reads at once that none will come.
    return subprocess.run(["agent-saga", *args], capture_output=True, text=True, timeout=120, check=False,
                          env=world.env, cwd=world.root, stdin=subprocess.DEVNULL)


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def exchange(command: list[str], world: World, lines: list[bytes], timeout: float = 120,
             wait_for: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Write raw ``lines`` (each + LF) to ``command``, then a ping with id ``"end"``; return every answer.

    Once "end" and every id in ``wait_for`` are answered, stdin is closed and the rest of the
    output read to EOF (a proxy answers calls still in flight before it exits). The SDK
    server of 2.x handles requests concurrently and may cancel what is in flight at EOF, so
    a test that needs a call to finish there names its id in ``wait_for``. A process that
    hangs is killed after ``timeout`` seconds, which the missing "end" answer then reports.
    """
    end = encode({"jsonrpc": "2.0", "id": "end", "method": "ping"})
    answers: list[dict[str, Any]] = []
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=world.env,
                          cwd=world.root) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            proc.stdin.write(b"".join(line + b"\n" for line in [*lines, end]))
            proc.stdin.flush()
            pending = {"end", *wait_for}
            for raw in proc.stdout:
                answers.append(json.loads(raw))
                pending.discard(answers[-1].get("id"))
                if not pending:
                    break
            proc.stdin.close()
            answers.extend(json.loads(raw) for raw in proc.stdout)
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
    assert any(a.get("id") == "end" for a in answers), f"{command} never answered the final ping (exit {proc.returncode})"
    return answers
