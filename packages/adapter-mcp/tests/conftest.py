"""Shared helpers: the test server's world, a real stdio MCP client, the proxy's command line."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:  # 1.x name
    from mcp.shared.exceptions import McpError
except ImportError:  # 2.x renamed it
    from mcp.shared.exceptions import MCPError as McpError  # type: ignore[no-redef,attr-defined]

__all__ = ["BIN", "SERVERS", "McpError", "World", "connect", "error_flag", "structured"]

SERVERS = Path(__file__).parent / "servers"
BIN = Path(sys.executable).parent

sys.path.insert(0, str(SERVERS))  # my_mcp_server, for the in-memory client tests


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
        }

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
