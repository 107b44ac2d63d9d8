"""AutoGen runs sync tools on executor threads that do not carry the caller's context.

These tests show the hazard with AutoGen's own loop, then that the adapter closes it:
the saga reaches the sync tool on that thread whether the tool was wrapped or patched.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga_autogen import saga_run, wrap_tool
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken
from autogen_core.tools import BaseTool, FunctionTool
from autogen_drive import agent
from pydantic import BaseModel

from agent_saga import Compensation, FileWAL, SagaAborted, compensator, current_saga
from agent_saga.plugins.patching import patch_all, unpatch_all
from agent_saga.testing import assert_wrap_tool_hook

SEEN: list[tuple[str | None, str]] = []
WORLD: list[str] = []


def probe(note: str) -> str:
    """Say which saga and thread the tool runs in."""
    saga = current_saga()
    SEEN.append((saga.saga_id if saga else None, threading.current_thread().name))
    return note


@compensator("autogen_test.cancel")
def cancel(ref: str) -> None:
    WORLD.append(f"cancel {ref}")


def _undo(result: Any) -> Compensation:
    return Compensation(fn=cancel, handler="autogen_test.cancel", kwargs={"ref": result["ref"]})


def hold_slot(slot: str) -> dict[str, Any]:
    """Hold a calendar slot."""
    WORLD.append(f"hold {slot} on {'main' if threading.current_thread() is threading.main_thread() else 'worker'}")
    return {"ref": f"slot-{slot}"}


class TicketArgs(BaseModel):
    title: str


class OpenTicket(BaseTool[TicketArgs, BaseModel]):
    """A hand-written AutoGen BaseTool (its own async run)."""

    def __init__(self) -> None:
        super().__init__(TicketArgs, BaseModel, "open_ticket", "Open a ticket.")

    async def run(self, args: TicketArgs, cancellation_token: CancellationToken) -> Any:
        WORLD.append(f"ticket {args.title}")
        return {"ref": f"ticket-{args.title}"}


def page_oncall(who: str) -> str:
    """Page the on-call engineer."""
    raise ConnectionError("pager unreachable")


@pytest.fixture(autouse=True)
def _clean() -> Any:
    SEEN.clear()
    WORLD.clear()
    unpatch_all()
    yield
    unpatch_all()


def _saga_ids(wal: FileWAL) -> set[str]:
    return {r["saga"] for r in wal.records()}


def test_without_the_adapter_a_sync_tool_loses_the_saga_and_with_it_keeps_it(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "ctx.wal")
    plain = FunctionTool(probe, description="probe")
    asyncio.run(saga_run(agent([plain], [("probe", {"note": "a"})]), task="go", wal=wal))
    saga_id, thread = SEEN[-1]
    assert saga_id is None  # AutoGen's executor dropped the context: an effect here is unprotected
    assert thread != threading.main_thread().name

    safe = wrap_tool(plain, semantics="REVERSIBLE")
    asyncio.run(saga_run(agent([safe], [("probe", {"note": "b"})]), task="go", wal=wal))
    saga_id, thread = SEEN[-1]
    sagas = [r["saga"] for r in wal.records() if r["type"] == "SAGA_STARTED"]
    assert saga_id == sagas[-1]
    assert thread != threading.main_thread().name  # still AutoGen's executor, not the loop
    wal.close()


def test_patch_all_carries_the_saga_into_the_executor_too(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "patched.wal")
    patch_all({"mode": "enforce", "tools": {"probe": {"semantics": "REVERSIBLE"}}})
    asyncio.run(saga_run(agent([FunctionTool(probe, description="probe")], [("probe", {"note": "a"})]),
                         task="go", wal=wal))
    saga_id, thread = SEEN[-1]
    assert saga_id == next(r["saga"] for r in wal.records() if r["type"] == "SAGA_STARTED")
    assert thread != threading.main_thread().name
    assert unpatch_all()["autogen"]
    SEEN.clear()
    asyncio.run(saga_run(agent([FunctionTool(probe, description="probe")], [("probe", {"note": "b"})]),
                         task="go", wal=wal))
    assert [(None, SEEN[0][1])] == SEEN  # unpatched: lost again
    wal.close()


def test_a_custom_basetool_and_a_sync_tool_are_unwound_newest_first(tmp_path: Path) -> None:
    ticket = OpenTicket()
    safe_ticket = wrap_tool(ticket, semantics="COMPENSABLE", compensate=_undo)
    assert type(safe_ticket) is OpenTicket
    assert safe_ticket.schema == ticket.schema
    slot = wrap_tool(FunctionTool(hold_slot, description="Hold a calendar slot."),
                     semantics="COMPENSABLE", compensate=_undo)
    pager = wrap_tool(FunctionTool(page_oncall, description="Page the on-call engineer."),
                      semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "custom.wal")
    calls = [("hold_slot", {"slot": "10:00"}), ("open_ticket", {"title": "db"}), ("page_oncall", {"who": "ann"})]
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(agent([slot, safe_ticket, pager], calls), task="go", wal=wal))
    # the last tool failed; the two before it are undone, newest first
    assert WORLD == ["hold 10:00 on worker", "ticket db", "cancel ticket-db", "cancel slot-10:00"]
    assert [s.tool for s in caught.value.report.compensated] == ["open_ticket", "hold_slot"]
    assert isinstance(caught.value.cause.cause, ConnectionError)  # type: ignore[attr-defined]
    assert len(_saga_ids(wal)) == 1
    # the original tool is untouched
    assert asyncio.run(ticket.run_json({"title": "x"}, CancellationToken())) == {"ref": "ticket-x"}
    wal.close()


def test_a_team_run_is_one_saga(tmp_path: Path) -> None:
    slot = wrap_tool(FunctionTool(hold_slot, description="Hold a calendar slot."),
                     semantics="COMPENSABLE", compensate=_undo)
    pager = wrap_tool(FunctionTool(page_oncall, description="Page."), semantics="IRREVERSIBLE")
    team = RoundRobinGroupChat(
        [agent([slot], [("hold_slot", {"slot": "9:00"})], name="planner"),
         agent([pager], [("page_oncall", {"who": "bo"})], name="pager")],
        termination_condition=MaxMessageTermination(8))
    wal = FileWAL(tmp_path / "team.wal")
    with pytest.raises(SagaAborted):
        asyncio.run(saga_run(team, task="go", wal=wal))
    assert WORLD == ["hold 9:00 on worker", "cancel slot-9:00"]
    assert len(_saga_ids(wal)) == 1
    wal.close()


def test_wrap_tool_names_what_it_needs() -> None:
    with pytest.raises(TypeError, match=r"takes autogen_core\..*BaseTool, got builtins.function; make one with FunctionTool"):
        wrap_tool(probe, semantics="REVERSIBLE")
    safe = wrap_tool(FunctionTool(probe, description="p"), semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(safe, semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(wrap_tool(OpenTicket(), semantics="REVERSIBLE"), semantics="REVERSIBLE")


def test_the_wrap_tool_hook_and_the_namespace_import() -> None:
    import agent_saga_autogen
    from agent_saga_autogen import adapter

    from agent_saga.adapters import autogen

    assert autogen is agent_saga_autogen
    tool = FunctionTool(probe, description="probe")
    wrapped = assert_wrap_tool_hook("autogen", tool, "ops.probe", name="ops.probe")
    assert wrapped.schema == tool.schema
    assert adapter.spec_of(tool) is None and adapter.spec_of(OpenTicket()) is None


def cancellable_hold(slot: str, cancellation_token: CancellationToken) -> dict[str, Any]:
    """Hold a slot (takes AutoGen's cancellation token)."""
    assert isinstance(cancellation_token, CancellationToken)
    WORLD.append(f"hold {slot}")
    return {"ref": f"slot-{slot}"}


def test_a_tool_that_takes_the_cancellation_token_still_gets_it_and_the_log_does_not(tmp_path: Path) -> None:
    tool = FunctionTool(cancellable_hold, description="Hold a slot.")
    safe = wrap_tool(tool, semantics="COMPENSABLE", compensate=_undo)
    assert safe.schema == tool.schema
    pager = wrap_tool(FunctionTool(page_oncall, description="Page."), semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "token.wal")
    with pytest.raises(SagaAborted):
        asyncio.run(saga_run(agent([safe, pager], [("cancellable_hold", {"slot": "8:00"}),
                                                   ("page_oncall", {"who": "cy"})]), task="go", wal=wal))
    assert WORLD == ["hold 8:00", "cancel slot-8:00"]
    intent = next(r for r in wal.records() if r["type"] == "STEP_INTENT")
    assert intent["body"]["args"] == {"slot": "8:00"}
    wal.close()


class Window(BaseModel):
    """A type only this module knows: AutoGen must resolve the annotation here, not in the adapter."""

    start: str
    hours: int


def book_window(window: Window, note: str = "") -> dict[str, Any]:
    """Book a maintenance window."""
    WORLD.append(f"window {window.start}+{window.hours}h")
    return {"ref": f"window-{window.start}"}


def test_a_tool_annotated_with_its_own_modules_types_keeps_its_schema_and_is_unwound(tmp_path: Path) -> None:
    tool = FunctionTool(book_window, description="Book a maintenance window.")
    safe = wrap_tool(tool, semantics="COMPENSABLE", compensate=_undo)
    assert safe.schema == tool.schema and safe.args_type().model_json_schema() == tool.args_type().model_json_schema()
    pager = wrap_tool(FunctionTool(page_oncall, description="Page."), semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "window.wal")
    calls = [("book_window", {"window": {"start": "02:00", "hours": 2}}), ("page_oncall", {"who": "di"})]
    with pytest.raises(SagaAborted):
        asyncio.run(saga_run(agent([safe, pager], calls), task="go", wal=wal))
    assert WORLD == ["window 02:00+2h", "cancel window-02:00"]
    intent = next(r for r in wal.records() if r["type"] == "STEP_INTENT")
    assert intent["body"]["args"]["note"] == ""
    wal.close()
