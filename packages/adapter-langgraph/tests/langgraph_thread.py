"""A LangGraph thread checkpointed by SqliteSaver, run as a ``@durable`` entry point (issue 41, part 6).

usage: python langgraph_thread.py WAL REQUEST

The graph is LangGraph's tool-calling loop (``langgraph_drive.agent_graph``): a model node, a
ToolNode whose ``book`` tool is an agent-saga step (``wrap_tool``), ``tools_condition`` between them. The model books every
city the request names in one response, so the ToolNode makes three calls in one node.

The LangGraph thread id *is* the saga id: the entry point reads it from the saga it runs in,
so a resume (``agent-saga recover --import langgraph_thread``), which re-invokes the entry
under the same saga id, continues the same thread from its last checkpoint. A thread that has
a checkpoint with nodes still to run is resumed (``invoke(None)``); a new one starts from the
request. ``durability="sync"``: each checkpoint is on disk before the next node starts.

``$AGENT_SAGA_KILLED_WORLD`` holds the world (``effects.sqlite``: every booking, cancellation and
model call) and the checkpoints (``checkpoints.sqlite``). ``$LG_HOLD_IN=CITY``: the booking of
CITY says ``booking CITY`` and waits to be killed, before it books anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agent_saga_langgraph import wrap_tool
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_drive import agent_graph

from agent_saga import FileWAL, Observation, current_saga, durable, reconciler

# agent_saga.testing._killed, not the package: the package imports pytest into the worker
from agent_saga.testing._killed import World, booking_cancelled, hold
from agent_saga.testing._killed import book as book_room

__all__ = ["CITIES", "TurnModel", "run_thread"]

CITIES = ["paris", "rome", "oslo"]


class TurnModel(BaseChatModel):
    """A scripted model that answers from the conversation, not from a counter of its own.

    A thread resumed from a checkpoint does not ask the model again for the turns the
    checkpoint holds: a model that counted its calls would answer the next turn with the
    first turn's script. This one books every city when no booking was asked for yet, and
    says "booked" once the tools answered. Each call is noted in the world.
    """

    @property
    def _llm_type(self) -> str:
        return "turn-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> TurnModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages) + 1
        World().note("model", f"turn {turn}")
        reply = AIMessage(content="", tool_calls=[
            {"name": "book", "args": {"city": city}, "id": f"call_{city}"} for city in CITIES
        ]) if turn == 1 else AIMessage(content="booked")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def book(city: str) -> dict[str, str]:
    """Book a hotel room in a city."""
    if os.environ.get("LG_HOLD_IN") == city:
        hold(f"booking {city}")
    return book_room(city)


@reconciler("book")
def booked(city: str, idempotency_key: str = "") -> Observation:
    """Asks the world (the provider) whether a booking whose process died landed."""
    landed = World().landed("book", city)
    return Observation(landed, detail=f"{city} {'is' if landed else 'is not'} booked",
                       result={"ref": f"R-{city}"} if landed else None)


booking = wrap_tool(book, semantics="COMPENSABLE", compensate=booking_cancelled)


def graph(saver: SqliteSaver) -> Any:
    """LangGraph's tool-calling loop over ``booking``, checkpointed by ``saver``."""
    return agent_graph(TurnModel(), [booking], checkpointer=saver)


@durable("lg.thread")
def run_thread(request: str) -> str:
    saga = current_saga()
    assert saga is not None  # a durable entry point always runs in its saga
    # One thread per saga; max_concurrency=1: the ToolNode runs a response's calls one after
    # another, in the order the model gave them, so a resume meets them in the recorded order.
    config: Any = {"configurable": {"thread_id": saga.saga_id}, "max_concurrency": 1}
    with SqliteSaver.from_conn_string(str(World().directory / "checkpoints.sqlite")) as saver:
        thread = graph(saver)
        resuming = bool(thread.get_state(config).next)
        state = thread.invoke(None if resuming else {"messages": [HumanMessage(request)]}, config, durability="sync")
    return str(state["messages"][-1].content)


def main(argv: list[str]) -> None:
    wal_path, request = argv
    wal = FileWAL(Path(wal_path))
    try:
        print(run_thread(request, saga_id="thread-7", wal=wal), flush=True)
    finally:
        wal.close()


if __name__ == "__main__":
    main(sys.argv[1:])
