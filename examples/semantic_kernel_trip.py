"""A Semantic Kernel agent books a trip; the card is declined; the bookings are undone.

    python examples/semantic_kernel_trip.py

The trip's tools and their undos are in trip.py. Here they become kernel functions of one
plugin, ``wrap_tool`` declares what each one is, and ``saga_run`` makes the agent's response one
transaction. Auto function calling hands the declined charge to the model and goes on; the
helper then fails the run, so nothing booked stays booked. The model is a scripted chat
completion service (no network, no key): with a key, pass ``service=OpenAIChatCompletion(...)``
instead. The log lands in ./semantic-kernel-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-semantic-kernel[semantic-kernel]'
"""

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import Field
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
from semantic_kernel.functions import KernelFunction, KernelPlugin, kernel_function
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.semantic_kernel import saga_run, wrap_tool


class ScriptedChat(ChatCompletionClientBase):
    """A stand-in for a chat model: one function call per turn, then a summary."""

    SUPPORTS_FUNCTION_CALLING = True
    turns: list[Any] = Field(default_factory=lambda: [
        *(ChatMessageContent(role=AuthorRole.ASSISTANT, items=[FunctionCallContent(
            id=f"call_{i}", plugin_name="trip", function_name=name, arguments=json.dumps(args))])
          for i, (name, args) in enumerate(CALLS)),
        ChatMessageContent(role=AuthorRole.ASSISTANT, content=SUMMARY),
    ])

    async def _inner_get_chat_message_contents(self, chat_history: Any, settings: Any) -> list[Any]:
        return [self.turns.pop(0)]


def function(fn: Any) -> KernelFunction:
    return KernelFunction.from_method(kernel_function(fn), plugin_name="trip")


plugin = KernelPlugin(name="trip", functions=[
    wrap_tool(function(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
    wrap_tool(function(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
    wrap_tool(function(charge_card), semantics="IRREVERSIBLE"),
])
agent = ChatCompletionAgent(name="travel_agent", instructions="Book the trip the traveller asks for.",
                            service=ScriptedChat(ai_model_id="scripted"), plugins=[plugin],
                            function_choice_behavior=FunctionChoiceBehavior.Auto())


async def main() -> None:
    Path("semantic-kernel-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("semantic-kernel-trip.wal")
    try:
        await saga_run(agent, messages=PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
