"""A LlamaIndex FunctionAgent books a trip; the card is declined; the bookings are undone.

    python examples/llamaindex_trip.py

The trip's tools and their undos are in trip.py. Here they become LlamaIndex ``FunctionTool``s,
``wrap_tool`` declares what each one is, and ``saga_run`` makes the agent's run one transaction.
The agent hands the declined charge to the model as an error output and goes on; the helper
then fails the run, so nothing booked stays booked. The model is LlamaIndex's own
``MockFunctionCallingLLM`` answering with scripted tool calls (no network, no key): with a key,
pass ``llm=OpenAI(model=...)`` instead. The log lands in ./llamaindex-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-llamaindex[llamaindex]'
"""

import asyncio
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.llamaindex import saga_run, wrap_tool


def scripted(messages: list[ChatMessage], **_: Any) -> ChatMessage:
    """The model's turn: the next call (by how many tool results it has seen), then a summary."""
    turn = sum(m.role == MessageRole.TOOL for m in messages)
    if turn >= len(CALLS):
        return ChatMessage(role=MessageRole.ASSISTANT, content=SUMMARY)
    name, args = CALLS[turn]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[ToolCallBlock(tool_call_id=f"call_{turn}", tool_name=name,
                                                                         tool_kwargs=args)])


agent = FunctionAgent(
    llm=MockFunctionCallingLLM(response_generator=scripted), system_prompt="Book the trip the traveller asks for.",
    tools=[wrap_tool(FunctionTool.from_defaults(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(FunctionTool.from_defaults(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(FunctionTool.from_defaults(charge_card), semantics="IRREVERSIBLE")],
)


async def main() -> None:
    Path("llamaindex-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("llamaindex-trip.wal")
    try:
        await saga_run(agent, user_msg=PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
