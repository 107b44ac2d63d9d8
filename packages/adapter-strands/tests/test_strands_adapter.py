"""What Strands hands a tool besides the model's arguments, patch_all, SagaFleet, and where the adapter is found."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_strands import saga_run, saga_run_sync, wrap_tool
from strands import Agent, ToolContext, tool
from strands_drive import agent, tool_results

import agent_saga
from agent_saga import (
    Compensation,
    FileWAL,
    SagaAborted,
    SagaFleet,
    ToolFailed,
    compensator,
    patch_all,
    saga_scope,
    unpatch_all,
)
from agent_saga.testing import assert_trip_undone

DONE: list[str] = []


@compensator("strands_test.cancel_flight")
def cancel_flight(booking: str) -> None:
    DONE.append(f"cancel {booking}")


@compensator("strands_test.refund")
def refund(charge: str) -> None:
    DONE.append(f"refund {charge}")


@tool
def book_flight(to: str) -> dict[str, str]:
    """Book a flight."""
    DONE.append(f"book {to}")
    return {"booking": f"bk-{to}"}


@tool
async def charge_card(amount: int) -> dict[str, str]:
    """Charge the card."""
    DONE.append(f"charge {amount}")
    return {"charge": f"ch-{amount}"}


@tool
def send_confirmation(email: str) -> str:
    """Send the confirmation mail."""
    raise ConnectionError("mail server unreachable")


def _cancel(r: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel_flight, handler="strands_test.cancel_flight", kwargs={"booking": r["booking"]})


def _refund(r: dict[str, str]) -> Compensation:
    return Compensation(fn=refund, handler="strands_test.refund", kwargs={"charge": r["charge"]})


TRIP = [("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
POLICY = {
    "book_flight": {"semantics": "COMPENSABLE",
                    "compensate": {"handler": "strands_test.cancel_flight", "args": {"booking": "$.booking"}}},
    "charge_card": {"semantics": "COMPENSABLE",
                    "compensate": {"handler": "strands_test.refund", "args": {"charge": "$.charge"}}},
}


@pytest.fixture(autouse=True)
def _clean() -> Any:
    DONE.clear()
    unpatch_all()
    yield
    unpatch_all()


def _records(wal: FileWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


def _undone_once_newest_first(wal: FileWAL, err: SagaAborted, *, clean: bool = True) -> None:
    assert DONE == ["book LIS", "charge 420", "refund ch-420", "cancel bk-LIS"]  # each undo exactly once
    assert [s.tool for s in err.report.compensated] == ["charge_card", "book_flight"]
    assert [r["step"] for r in _records(wal, "STEP_COMPENSATED")] == [2, 1]
    assert err.report.clean is clean  # a failed IRREVERSIBLE step is UNKNOWN: never clean


def test_held_out_two_tools_run_the_run_fails_after_them_both_undone_newest_first_once(tmp_path: Path) -> None:
    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=_cancel),
             wrap_tool(charge_card, semantics="COMPENSABLE", compensate=_refund),
             wrap_tool(send_confirmation, semantics="IRREVERSIBLE")]
    worker = agent(tools, [*TRIP, ("send_confirmation", {"email": "a@b.c"})])
    wal = FileWAL(tmp_path / "held-out.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(worker, "book it", wal=wal))
    # Strands gave the model the error and went on; the helper failed the run.
    assert isinstance(caught.value.cause, ToolFailed)
    assert isinstance(caught.value.cause.cause, ConnectionError)
    assert tool_results(worker)[-1] == "Error: ConnectionError - mail server unreachable"
    _undone_once_newest_first(wal, caught.value, clean=False)
    wal.close()


def test_held_out_with_the_top_level_wrap_tool_and_a_failure_after_the_run(tmp_path: Path) -> None:
    tools = [agent_saga.wrap_tool(book_flight, semantics="COMPENSABLE", compensate=_cancel),
             agent_saga.wrap_tool(charge_card, semantics="COMPENSABLE", compensate=_refund)]
    assert [type(t) for t in tools] == [type(book_flight)] * 2
    wal = FileWAL(tmp_path / "top-level.wal")

    def trip() -> None:
        with saga_scope(wal):
            agent(tools, TRIP)("book it")
            raise RuntimeError("the hotel is full")

    with pytest.raises(SagaAborted) as caught:
        trip()
    assert str(caught.value.cause) == "the hotel is full"
    _undone_once_newest_first(wal, caught.value)
    wal.close()


SEEN: list[Any] = []


@tool(context=True)
def note(text: str, tool_context: ToolContext, agent: Agent) -> dict[str, str]:
    """Write a note for the reviewers."""
    SEEN.append((text, tool_context.tool_use["name"], type(agent).__name__))
    return {"ref": text}


@tool(context="ctx")
async def memo(text: str, ctx: ToolContext) -> dict[str, str]:
    """Write a memo."""
    SEEN.append((text, ctx.tool_use["name"]))
    return {"ref": text}


def test_the_tool_context_and_agent_reach_the_function_but_not_the_log_nor_the_spec(tmp_path: Path) -> None:
    SEEN.clear()
    safe = [wrap_tool(note, semantics="REVERSIBLE"), wrap_tool(memo, semantics="REVERSIBLE")]
    assert [s.tool_spec for s in safe] == [note.tool_spec, memo.tool_spec]
    assert list(note.tool_spec["inputSchema"]["json"]["properties"]) == ["text"]
    wal = FileWAL(tmp_path / "context.wal")
    saga_run_sync(agent(safe, [("note", {"text": "hi"}), ("memo", {"text": "ho"})]), "go", wal=wal)
    assert SEEN == [("hi", "note", "Agent"), ("ho", "memo")]
    # REVERSIBLE steps log their arguments with the commit: the ToolContext and agent are not among them.
    assert [(r["body"]["tool"], r["body"]["args"]) for r in _records(wal, "STEP_COMMITTED")] == [
        ("note", {"text": "hi"}), ("memo", {"text": "ho"})]
    wal.close()


def test_patch_all_makes_tool_functions_steps_and_refuses_an_unclassified_one_before_it_runs(tmp_path: Path) -> None:
    SEEN.clear()
    patch_all({"mode": "enforce", "tools": {**POLICY, "note": {"semantics": "REVERSIBLE"}}})

    @tool
    def send_confirmation(email: str) -> str:
        """Send the confirmation mail (unclassified)."""
        DONE.append("mail")
        return "sent"

    tools = [book_flight, charge_card, note, send_confirmation]
    calls = [*TRIP, ("note", {"text": "hi"}), ("send_confirmation", {"email": "a@b.c"})]
    worker = agent(tools, calls)
    wal = FileWAL(tmp_path / "patched.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", wal=wal)
    assert "mail" not in DONE
    assert [(r["body"]["tool"], r["body"]["args"]) for r in _records(wal, "STEP_INTENT")] == [
        ("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
    # A REVERSIBLE step logs its arguments with its commit: the ToolContext and agent are not among them.
    assert [r["body"]["args"] for r in _records(wal, "STEP_COMMITTED") if r["body"].get("tool") == "note"] == [{"text": "hi"}]
    assert SEEN == [("hi", "note", "Agent")]
    assert [(r["body"]["tool"], r["body"]["rule"]) for r in _records(wal, "STEP_REFUSED")] == [
        ("send_confirmation", "policy.unclassified")]
    assert DONE == ["book LIS", "charge 420", "refund ch-420", "cancel bk-LIS"]
    assert caught.value.report.clean
    wal.close()


@tool
async def ticker(symbol: str) -> AsyncIterator[str]:
    """Stream a ticker."""
    yield f"{symbol} up"


def test_a_streaming_tool_is_refused_by_wrap_tool_with_what_to_do() -> None:
    with pytest.raises(TypeError, match=r"tool 'ticker' is an async generator .* make the step a function that returns it"):
        wrap_tool(ticker, semantics="REVERSIBLE")


@compensator("strands_fleet.release")
def release(reservation_id: str) -> None:
    DONE.append(f"release {reservation_id}")


@compensator("strands_fleet.unpublish")
def unpublish(doc_id: str) -> None:
    DONE.append(f"unpublish {doc_id}")


@pytest.mark.parametrize("blocking", [False, True], ids=["invoke_async", "call"])
def test_a_fleet_saga_reaches_the_threads_strands_runs_sync_tools_on(tmp_path: Path, blocking: bool) -> None:
    threads: list[str] = []

    async def reserve_budget(amount: int) -> dict[str, Any]:
        """Reserve research budget."""
        DONE.append(f"reserve {amount}")
        return {"reservation_id": "res_1"}

    def publish_draft(title: str) -> dict[str, Any]:
        """Publish the draft."""
        threads.append(threading.current_thread().name)
        DONE.append(f"publish {title}")
        return {"doc_id": "doc_1"}

    fleet = SagaFleet("content-pipeline")
    reserve = fleet.register(reserve_budget, framework="crewai", name="research.reserve",
                             semantics="COMPENSABLE", compensate=release)
    publish = fleet.register(publish_draft, framework="strands", name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    fleet.assert_fully_covered(["research.reserve", "writer.publish"])
    tools = [tool(publish), send_confirmation]  # a registered callable is an ordinary @tool function
    assert tools[0].tool_name == "publish_draft"
    assert list(tools[0].tool_spec["inputSchema"]["json"]["properties"]) == ["title"]
    worker = agent(tools, [("publish_draft", {"title": "Q3"}), ("send_confirmation", {"email": "a@b.c"})])
    wal = FileWAL(tmp_path / "fleet.wal")

    async def pipeline() -> None:
        async with fleet.transaction(wal=wal):
            await reserve(amount=5000)
            await worker.invoke_async("write it up")
            raise RuntimeError("the review failed")

    def blocking_pipeline() -> None:  # agent(prompt): the loop on Strands' own thread, the tool on another
        with fleet.transaction(wal=wal):
            asyncio.run(reserve(amount=5000))
            worker("write it up")
            raise RuntimeError("the review failed")

    with pytest.raises(SagaAborted) as caught:
        blocking_pipeline() if blocking else asyncio.run(pipeline())
    assert threads and threads[0] != threading.main_thread().name  # Strands' asyncio.to_thread worker
    assert DONE == ["reserve 5000", "publish Q3", "unpublish doc_1", "release res_1"]
    assert [s.tool for s in caught.value.report.compensated] == ["writer.publish", "research.reserve"]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()


def test_both_import_paths_and_the_framework_module_name_the_right_adapter() -> None:
    import agent_saga_strands

    from agent_saga.adapters import strands

    assert strands is agent_saga_strands
    with pytest.raises(TypeError, match=r"agent-saga-strands's wrap_tool takes strands\.tools\.decorator\.DecoratedFunctionTool, got builtins\.int; make one with @strands\.tool"):
        wrap_tool(3, semantics="REVERSIBLE")  # type: ignore[type-var]
    Foreign = type("PythonAgentTool", (), {"__module__": "strands.tools.tools"})
    with pytest.raises(TypeError, match=r"takes strands\.tools\.decorator\.DecoratedFunctionTool, got strands\.tools\.tools\.PythonAgentTool"):
        agent_saga.wrap_tool(Foreign(), semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="'book_flight' is already wrapped"):
        wrap_tool(wrap_tool(book_flight, semantics="REVERSIBLE"), semantics="REVERSIBLE")


def test_an_install_whose_strands_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from strands.tools.decorator import DecoratedFunctionTool
        del DecoratedFunctionTool.stream   # what a refactor of Strands could do
        try:
            import agent_saga_strands
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-strands supports strands-agents<2,>=1.21.0 (installed: strands-agents 1.")
    assert "no longer has DecoratedFunctionTool._tool_func" in out
    assert "pip install 'agent-saga-strands[strands]>=3.0.0'" in out


def test_the_example_books_the_trip_and_undoes_it_each_time_it_runs(tmp_path: Path) -> None:
    assert_trip_undone("strands_trip", tmp_path)  # `python examples/strands_trip.py`, as a user runs it
