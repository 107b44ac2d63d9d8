"""An agent books a trip through an MCP server's tools; the card is declined; the bookings are undone.

    python examples/mcp_trip.py

The trip's tools and their undos are in trip.py. Here an MCP server (the official SDK's
``MCPServer``, in this process) offers the tools, and the agent's client calls them. MCP has no
agent loop of its own to hook: ``wrap_tool(client, name, ...)`` declares what each tool is, and a
``saga_scope`` around the agent's calls is the transaction (the calls come from a script here, as
a model's would). The server reports the declined charge in band (an error result): the protocol
cannot say whether a failed tool acted, so that step is UNKNOWN and the report says the rollback
is not clean (everything known was undone; the charge is for a person to check). The log lands
in ./mcp-trip.wal. Agents you cannot change are covered by the ``agent-saga mcp`` proxy instead
(docs/MCP.md).

Needs: pip install -e ./packages/core -e './packages/adapter-mcp[mcp]'   (mcp 2.x)
"""

import asyncio
from pathlib import Path

from mcp import Client
from mcp.server.mcpserver import MCPServer
from trip import CALLS, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.adapters.mcp import wrap_tool

server = MCPServer("travel")
for fn in (hold_seat, book_hotel, charge_card):
    server.tool()(fn)


async def main() -> None:
    Path("mcp-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("mcp-trip.wal")
    async with Client(server) as client:
        tools = {"hold_seat": wrap_tool(client, "hold_seat", semantics="COMPENSABLE", compensate=seat_undo),
                 "book_hotel": wrap_tool(client, "book_hotel", semantics="COMPENSABLE", compensate=room_undo),
                 "charge_card": wrap_tool(client, "charge_card", semantics="IRREVERSIBLE")}
        try:
            async with saga_scope(wal, name="mcp-trip"):
                for name, args in CALLS:
                    await tools[name](args)
        except SagaAborted as err:
            print(err.report.format_text())  # what was undone, newest first, and whether it is clean
        finally:
            wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
