"""An AutoGen AssistantAgent books a trip; the card is declined; the bookings are undone.

    python examples/autogen_trip.py

The trip's tools and their undos are in trip.py. Here they become AutoGen ``FunctionTool``s,
``wrap_tool`` declares what each one is, and ``saga_run`` makes the agent's run one transaction.
AutoGen runs a sync tool on an executor thread that does not carry the caller's context; the
wrapped tool carries the saga there. It hands the declined charge to the model as an error result
and goes on; the helper then fails the run, so nothing booked stays booked. The model is
AutoGen's own ``ReplayChatCompletionClient`` (no network, no key): with a key, pass an
``OpenAIChatCompletionClient(model=...)`` instead. The log lands in ./autogen-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-autogen[autogen]' 'autogen-ext>=0.6.2,<0.8'
"""

import asyncio
import json
from pathlib import Path

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.autogen import saga_run, wrap_tool

model = ReplayChatCompletionClient(
    [*(CreateResult(content=[FunctionCall(id=f"call_{i}", name=name, arguments=json.dumps(args))],
                    finish_reason="function_calls", usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                    cached=False) for i, (name, args) in enumerate(CALLS)),
     SUMMARY],
    model_info={"function_calling": True, "vision": False, "json_output": False, "family": "unknown",
                "structured_output": False},
)
agent = AssistantAgent(
    "travel_agent", model_client=model, max_tool_iterations=len(CALLS) + 1, reflect_on_tool_use=True,
    tools=[wrap_tool(FunctionTool(hold_seat, description="Hold a seat on a flight."),
                     semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(FunctionTool(book_hotel, description="Book a hotel room."),
                     semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(FunctionTool(charge_card, description="Charge the traveller's card."), semantics="IRREVERSIBLE")],
)


async def main() -> None:
    Path("autogen-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("autogen-trip.wal")
    try:
        await saga_run(agent, task=PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
