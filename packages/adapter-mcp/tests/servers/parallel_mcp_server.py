"""A real MCP server over stdio for the proxy's parallel case: bookings that wait for the proxy's log.

* ``book(seat)`` says it started (a file ``started-<seat>`` in ``$MY_MCP_WORLD``), waits until
  the proxy's log (``$AGENT_SAGA_WAL``) holds a record of type ``$PARALLEL_RELEASE`` (none
  set: no wait), then books: the line ``do:book:<seat>`` in ``$MY_MCP_WORLD/ledger``.
* ``unbook(ref)``, the undo: the line ``undo:<ref>``.
* ``quote(channel)`` waits until ``$PARALLEL_SIBLINGS`` bookings have started, then fails (an
  error result): the call of the response that fails while the others are in flight.

The tools are async, so the server (FastMCP on mcp 1.x, MCPServer on 2.x) keeps reading
requests while one waits. Every wait is bounded by ``BOUND`` seconds; one that runs out is
written to ``$MY_MCP_WORLD/stalls`` for the test to report, and the tool goes on.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga.log import read_records

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server  # type: ignore[no-redef]

__all__ = ["BOUND", "server"]

server = _Server("parallel-mcp-server")
#: The longest any wait of a tool may take (seconds); reached only when something is wrong.
BOUND = 30.0
#: How often a wait looks again: the log and the world are files another process writes.
_LOOK_EVERY = 0.01


def _world() -> Path:
    path = Path(os.environ.get("MY_MCP_WORLD", "world"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _note(file: str, line: str) -> None:
    with open(_world() / file, "a") as f:
        f.write(line + "\n")


async def _until(holds: Callable[[], bool], what: str) -> None:
    """Wait (bounded) until ``holds()``; a wait that runs out is noted in ``stalls``."""
    deadline = time.monotonic() + BOUND
    while not holds():
        if time.monotonic() > deadline:
            _note("stalls", f"waited {BOUND:.0f}s for {what} and went on")
            return
        await asyncio.sleep(_LOOK_EVERY)


def _logged(rtype: str) -> bool:
    path = Path(os.environ["AGENT_SAGA_WAL"])
    return path.exists() and any(r["type"] == rtype for r in read_records(path))


@server.tool(description="Book a seat.")
async def book(seat: str) -> dict[str, Any]:
    (_world() / f"started-{seat}").touch()
    release = os.environ.get("PARALLEL_RELEASE")
    if release:
        await _until(lambda: _logged(release), f"{release} in the proxy's log (book {seat})")
    _note("ledger", f"do:book:{seat}")
    return {"ref": f"book:{seat}"}


@server.tool(description="Cancel a booking.")
async def unbook(ref: str) -> dict[str, Any]:
    _note("ledger", f"undo:{ref}")
    return {"cancelled": ref}


@server.tool(description="Ask for a quote (its service is down).")
async def quote(channel: str) -> dict[str, Any]:
    siblings = int(os.environ.get("PARALLEL_SIBLINGS", "0"))
    await _until(lambda: len(list(_world().glob("started-*"))) >= siblings, f"{siblings} bookings to start")
    raise RuntimeError("quote service unreachable")


if __name__ == "__main__":
    server.run()
