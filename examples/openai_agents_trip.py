"""An OpenAI Agents SDK agent books a trip; the card is declined; the bookings are undone.

    python examples/openai_agents_trip.py

The trip's tools and their undos are in trip.py. Here they become ``@function_tool``s,
``wrap_tool`` declares what each one is, and ``saga_run`` makes ``Runner.run`` one transaction.
The SDK hands the declined charge to the model as an error message and the run goes on; the
helper then fails the run, so nothing booked stays booked. The model is the SDK's own
``agents.testing.ScriptedModel`` (no network, no key): with a key, drop ``model=``. The log lands
in ./openai-agents-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-openai-agents[openai-agents]'
"""

import asyncio
from pathlib import Path

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.openai_agents import saga_run, wrap_tool

set_tracing_disabled(True)  # offline: no traces sent
agent = Agent(
    name="travel agent", instructions="Book the trip the traveller asks for.",
    tools=[wrap_tool(function_tool(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(function_tool(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(function_tool(charge_card), semantics="IRREVERSIBLE")],
    model=ScriptedModel([*([function_call(name, args, call_id=f"call_{i}")] for i, (name, args) in enumerate(CALLS)),
                         [assistant_message(SUMMARY)]]),
)


async def main() -> None:
    Path("openai-agents-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("openai-agents-trip.wal")
    try:
        await saga_run(agent, PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
