"""What the conformance suite does not cover: BaseTool subclasses, akickoff, the hook, errors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_crewai import saga_kickoff, saga_kickoff_async, wrap_tool
from crewai.tools import BaseTool, tool
from crewai_drive import crew, react_crew
from pydantic import BaseModel

from agent_saga import FileWAL, NotApplied, SagaAborted, patch_all, unpatch_all
from agent_saga.testing import DONE, REF_UNDO, assert_wrap_tool_hook, cancel_ref, trip_world


class BookArgs(BaseModel):
    room: str


class BookRoom(BaseTool):
    """A hand-written BaseTool subclass: CrewAI calls its _run."""

    name: str = "book_room"
    description: str = "Book a meeting room."
    args_schema: type[BaseModel] = BookArgs

    def _run(self, room: str) -> dict[str, Any]:
        DONE.append(f"book {room}")
        return {"ref": f"booking-{room}"}


@tool
def order_lunch(people: int) -> dict[str, Any]:
    """Order lunch for the meeting."""
    DONE.append(f"lunch for {people}")
    return {"ref": f"lunch-{people}"}


@tool
def send_invites(to: str) -> str:
    """Send the invitations."""
    raise NotApplied("mail server refused the batch")


@pytest.fixture(autouse=True)
def _world() -> Iterator[None]:
    with trip_world():
        yield


def test_a_basetool_subclass_keeps_its_class_and_schema_and_is_unwound(tmp_path: Path) -> None:
    room = BookRoom()
    safe = wrap_tool(room, semantics="COMPENSABLE", compensate=cancel_ref)
    assert type(safe) is BookRoom
    assert (safe.name, safe.description, safe.args_schema) == (room.name, room.description, room.args_schema)
    lunch = wrap_tool(order_lunch, semantics="COMPENSABLE", compensate=cancel_ref)
    invites = wrap_tool(send_invites, semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "crew.wal")
    calls = [("book_room", {"room": "4b"}), ("order_lunch", {"people": 6}), ("send_invites", {"to": "team"})]
    with pytest.raises(SagaAborted) as caught:
        saga_kickoff(crew([safe, lunch, invites], calls), wal=wal)
    # the last tool failed: the earlier two are undone, newest first
    assert DONE == ["book 4b", "lunch for 6", "cancel lunch-6", "cancel booking-4b"]
    assert [s.tool for s in caught.value.report.compensated] == ["order_lunch", "book_room"]
    assert caught.value.report.clean
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()
    # the original tool is untouched: outside any saga, and unwrapped, it just runs
    assert room._run("5c") == {"ref": "booking-5c"}


def test_akickoff_runs_as_one_saga_too(tmp_path: Path) -> None:
    lunch = wrap_tool(order_lunch, semantics="COMPENSABLE", compensate=cancel_ref)
    invites = wrap_tool(send_invites, semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "akick.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_kickoff_async(crew([lunch, invites], [("order_lunch", {"people": 2}),
                                                               ("send_invites", {"to": "x"})]), wal=wal))
    assert DONE == ["lunch for 2", "cancel lunch-2"]
    assert isinstance(caught.value.cause.cause, NotApplied)  # type: ignore[attr-defined]
    wal.close()


def test_a_successful_kickoff_commits_and_returns_the_crews_output(tmp_path: Path) -> None:
    lunch = wrap_tool(order_lunch, semantics="COMPENSABLE", compensate=cancel_ref)
    wal = FileWAL(tmp_path / "ok.wal")
    out = saga_kickoff(crew([lunch], [("order_lunch", {"people": 3})]), wal=wal)
    assert out.raw == "done"
    assert DONE == ["lunch for 3"]
    assert [r["type"] for r in wal.records()][-1] == "SAGA_COMPLETED"
    wal.close()


def test_wrap_tool_names_what_it_needs() -> None:
    with pytest.raises(TypeError, match=r"takes crewai\.tools\..*BaseTool, got .*; wrap the function with crewai\.tools\.tool"):
        wrap_tool(len, semantics="REVERSIBLE")
    safe = wrap_tool(order_lunch, semantics="COMPENSABLE", compensate=cancel_ref)
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(safe, semantics="COMPENSABLE", compensate=cancel_ref)
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(wrap_tool(BookRoom(), semantics="REVERSIBLE"), semantics="REVERSIBLE")


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    from agent_saga_crewai import adapter

    wrapped = assert_wrap_tool_hook("crewai", order_lunch, "catering.order", name="catering.order")
    assert wrapped.args_schema is order_lunch.args_schema
    assert adapter.spec_of(order_lunch) is None and adapter.spec_of(BookRoom()) is None


_POLICY = {"mode": "enforce", "tools": {
    "order_lunch": {"semantics": "COMPENSABLE", "compensate": REF_UNDO},
    "send_invites": {"semantics": "IRREVERSIBLE"},
}}


@pytest.mark.parametrize("how", ["wrap_tool", "patch_all"])
def test_the_react_text_loop_is_covered_too(tmp_path: Path, how: str) -> None:
    from agent_saga_crewai import saga_kickoff
    from crewai_drive import react_crew

    from agent_saga.plugins.patching import patch_all, unpatch_all

    if how == "wrap_tool":
        tools = [wrap_tool(order_lunch, semantics="COMPENSABLE", compensate=cancel_ref),
                 wrap_tool(send_invites, semantics="IRREVERSIBLE")]
    else:
        patch_all(_POLICY)
        tools = [order_lunch, send_invites]
    wal = FileWAL(tmp_path / "react.wal")
    try:
        with pytest.raises(SagaAborted) as caught:
            saga_kickoff(react_crew(tools, [("order_lunch", {"people": 4}), ("send_invites", {"to": "all"})]),
                         wal=wal)
    finally:
        unpatch_all()
    assert DONE == ["lunch for 4", "cancel lunch-4"]
    intents = [(r["step"], r["body"]["tool"]) for r in wal.records() if r["type"] == "STEP_INTENT"]
    assert intents[0] == (1, "order_lunch")
    # CrewAI's text loop retries a tool that raised: every attempt is a step of its own,
    # and each one says it did nothing.
    retried = [step for step, name in intents[1:]]
    assert retried and all(name == "send_invites" for _, name in intents[1:])
    assert [r["step"] for r in wal.records() if r["type"] == "STEP_NOT_APPLIED"] == retried
    assert caught.value.report.clean
    wal.close()


HOLDING, HELD = threading.Event(), threading.Event()


@tool
def hold_room(room: str) -> dict[str, Any]:
    """Hold a room until released."""
    HOLDING.set()
    HELD.wait(30)
    DONE.append(f"hold {room}")
    return {"ref": f"hold-{room}"}


@pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
def test_a_cancelled_akickoff_follows_a_react_call_until_its_function_returns(tmp_path: Path, via: str) -> None:
    # akickoff's ReAct loop awaits CrewStructuredTool.ainvoke, which runs a sync function on the
    # loop's executor: cancelling the run does not stop the function, so its step must wait for it.
    HOLDING.clear()
    HELD.clear()
    if via == "patch_all":
        patch_all({"mode": "enforce", "tools": {"hold_room": {"semantics": "COMPENSABLE", "compensate": REF_UNDO}}})
        held = hold_room
    else:
        held = wrap_tool(hold_room, semantics="COMPENSABLE", compensate=cancel_ref)
    wal = FileWAL(tmp_path / "react.wal")

    async def cancelled() -> None:
        run = asyncio.ensure_future(saga_kickoff_async(react_crew([held], [("hold_room", {"room": "blue"})]), wal=wal))
        assert await asyncio.to_thread(HOLDING.wait, 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        HELD.set()  # the function, on its thread, books after the run was cancelled

    try:
        asyncio.run(cancelled())
    finally:
        unpatch_all()
    # Its step stayed in flight, so the booking was undone as it landed, on the function's own thread
    # (which asyncio.run joined before returning).
    assert DONE == ["hold blue", "cancel hold-blue"]
    wal.barrier()
    types = [r["type"] for r in wal.records()]
    assert types.index("SAGA_ROLLED_BACK") < types.index("STEP_COMMITTED") < types.index("STEP_COMPENSATED"), types
    wal.close()
