"""A Pydantic AI agent books a trip; the card is declined; the bookings are undone.

    python examples/pydantic_ai_trip.py

The trip's tools and their undos are in trip.py. Here they become Pydantic AI ``Tool``s,
``wrap_tool`` declares what each one is, and ``saga_run_sync`` makes ``agent.run_sync`` one
transaction (for ``@agent.tool`` functions, ``wrap_tools(agent, {...})`` does the same in place).
A tool's exception ends a Pydantic AI run; the saga undoes what ran. The model is Pydantic AI's
own ``FunctionModel`` answering with scripted tool calls (no network, no key): with a key, pass
``"openai:gpt-4o"`` instead. The log lands in ./pydantic-ai-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-pydantic-ai[pydantic-ai]'
"""

from pathlib import Path

from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.pydantic_ai import saga_run_sync, wrap_tool


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model's turn: the next call (by how many responses it gave), then a summary."""
    turn = sum(m.kind == "response" for m in messages)
    if turn < len(CALLS):
        return ModelResponse(parts=[ToolCallPart(*CALLS[turn])])
    return ModelResponse(parts=[TextPart(SUMMARY)])


agent = Agent(FunctionModel(scripted), instructions="Book the trip the traveller asks for.",
              tools=[wrap_tool(Tool(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
                     wrap_tool(Tool(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
                     wrap_tool(Tool(charge_card), semantics="IRREVERSIBLE")])


def main() -> None:
    Path("pydantic-ai-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("pydantic-ai-trip.wal")
    try:
        saga_run_sync(agent, PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
