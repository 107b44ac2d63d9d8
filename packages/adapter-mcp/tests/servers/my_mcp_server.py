"""A real MCP server over stdio for the proxy tests, with a world kept in files.

``$MY_MCP_WORLD`` is a directory: ``charges.json`` holds charges and refunds, and
``calls.jsonl`` gets one line per tool call the server actually received, so a test
can tell what reached the server and what the proxy stopped.
Runs with mcp 1.x (FastMCP) or 2.x (MCPServer): ``python -m my_mcp_server``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server  # type: ignore[no-redef]

__all__ = ["server"]

server = _Server("my-mcp-server")


def _world() -> Path:
    path = Path(os.environ.get("MY_MCP_WORLD", "world"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _state() -> Iterator[dict[str, Any]]:
    world = _world()
    with open(world / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        file = world / "charges.json"
        state: dict[str, Any] = json.loads(file.read_text()) if file.exists() else {"charges": {}, "refunds": {}}
        yield state
        tmp = file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, sort_keys=True))
        os.replace(tmp, file)


def _log(tool: str, args: dict[str, Any]) -> None:
    with open(_world() / "calls.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")


@server.tool(description="Charge a customer; returns the charge.")
def create_charge(amount: int, customer: str) -> dict[str, Any]:
    _log("create_charge", {"amount": amount, "customer": customer})
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")
    with _state() as state:
        charge_id = f"ch_{len(state['charges']) + 1}"
        state["charges"][charge_id] = {"amount": amount, "customer": customer, "refunded": False}
    return {"id": charge_id, "amount": amount, "customer": customer}


@server.tool(description="Refund a charge in full.")
def create_refund(charge: str) -> dict[str, Any]:
    _log("create_refund", {"charge": charge})
    with _state() as state:
        if charge not in state["charges"]:
            raise ValueError(f"no such charge {charge!r}")
        state["charges"][charge]["refunded"] = True
        refund_id = f"re_{len(state['refunds']) + 1}"
        state["refunds"][refund_id] = charge
    return {"id": refund_id, "charge": charge}


@server.tool(description="Search the documentation.")
def search_docs(query: str) -> dict[str, Any]:
    _log("search_docs", {"query": query})
    return {"hits": [f"doc about {query}"]}


@server.tool(description="Delete everything. Irreversible.")
def delete_everything() -> str:
    _log("delete_everything", {})
    with _state() as state:
        state["charges"].clear()
    return "deleted"


if __name__ == "__main__":
    server.run()
