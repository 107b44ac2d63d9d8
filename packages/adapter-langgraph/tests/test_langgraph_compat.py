"""What the adapter takes from LangChain beyond its documented API (_compat), through the real loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from agent_saga_langgraph import saga_run, wrap_tool
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph_drive import agent_graph, script

from agent_saga import FileWAL, SagaAborted, compensator, patch_all, saga_scope, unpatch_all
from agent_saga.testing import assert_moved_fails_at_import

RECEIVED: list[tuple[str, Any]] = []


@tool
def book(
    room: str, config: RunnableConfig, tool_call_id: Annotated[str, InjectedToolCallId], callbacks: Any = None
) -> str:
    """Book a meeting room."""
    RECEIVED.append((room, (sorted(config)[:1], tool_call_id, type(callbacks).__name__)))
    return f"booked {room}"


def test_values_langchain_injects_reach_the_function_but_not_the_log(tmp_path: Path) -> None:
    RECEIVED.clear()
    safe = wrap_tool(book, semantics="REVERSIBLE")
    assert safe.tool_call_schema.model_json_schema() == book.tool_call_schema.model_json_schema()
    wal = FileWAL(tmp_path / "injected.wal")
    graph = agent_graph(script([("book", {"room": "blue"})]), [safe])
    asyncio.run(saga_run(graph, {"messages": [HumanMessage("book it")]}, wal=wal))
    # The config, the call id and the callbacks arrived ...
    assert RECEIVED == [("blue", (["callbacks"], "call_0", "CallbackManager"))]
    step = next(r["body"] for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert step["tool"] == "book" and step["args"] == {"room": "blue"}  # ... and stayed out of the log
    wal.close()


HELD = threading.Event()
HOLDING = threading.Event()


@compensator("lg_compat.unbook")
def unbook(ref: str) -> None:
    RECEIVED.append(("unbook", ref))


@tool
def hold_room(room: str) -> dict[str, str]:
    """Hold a room until released."""
    HOLDING.set()
    HELD.wait(30)
    RECEIVED.append(("hold", room))
    return {"ref": room}


def test_a_cancelled_arun_of_a_sync_tool_under_patch_all_is_followed_until_the_function_returns(
    tmp_path: Path,
) -> None:
    # `await tool.arun(...)` (what LangChain's AgentExecutor does) runs a sync function's _run on an
    # executor thread: cancelling the call does not stop it, so its step must wait for it.
    RECEIVED.clear()
    HELD.clear()
    HOLDING.clear()
    patch_all({"mode": "enforce", "tools": {"hold_room": {
        "semantics": "COMPENSABLE", "compensate": {"handler": "lg_compat.unbook", "args": {"ref": "$.ref"}}}}})
    wal = FileWAL(tmp_path / "arun.wal")

    async def agent_gives_up() -> None:
        async with saga_scope(wal):
            call = asyncio.ensure_future(hold_room.arun({"room": "blue"}))
            assert await asyncio.to_thread(HOLDING.wait, 30)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            HELD.set()  # the function, on its thread, books after its caller stopped waiting
            raise RuntimeError("the agent gave up")

    try:
        with pytest.raises(SagaAborted) as caught:
            asyncio.run(agent_gives_up())
    finally:
        unpatch_all()
    assert RECEIVED == [("hold", "blue"), ("unbook", "blue")]
    assert caught.value.report.clean
    wal.close()


def test_an_install_whose_langchain_moved_fails_at_import_naming_the_supported_range() -> None:
    out = assert_moved_fails_at_import("agent_saga_langgraph", "from langchain_core.tools import StructuredTool; del StructuredTool._run",
                                       "", "(installed: langchain-core 1.", "StructuredTool / Tool no longer have func/coroutine fields, or their own _run / _arun(*args, ")
    assert "langgraph<1.3,>=1.1.5" in out and "langchain-core<1.9,>=1.2.5" in out
