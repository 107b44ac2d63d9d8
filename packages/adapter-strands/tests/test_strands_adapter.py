"""What Strands hands a tool besides the model's arguments, patch_all, SagaFleet, and where the adapter is found."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_strands import saga_run, saga_run_sync, wrap_tool
from strands import Agent, ToolContext, tool
from strands_drive import agent, tool_results

import agent_saga
from agent_saga import FileWAL, SagaAborted, ToolFailed, patch_all, testing
from agent_saga.testing import DONE, TRIP, TRIP_POLICY, assert_fleet_undone, cancelled, records, refunded

book_flight, charge_card = tool(testing.book_flight), tool(testing.charge_card)
send_confirmation = tool(testing.send_confirmation)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with testing.trip_world():
        yield


def test_held_out_two_tools_run_the_run_fails_after_them_both_undone_newest_first_once(tmp_path: Path) -> None:
    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=cancelled),
             wrap_tool(charge_card, semantics="COMPENSABLE", compensate=refunded),
             wrap_tool(send_confirmation, semantics="IRREVERSIBLE")]
    worker = agent(tools, [*TRIP, ("send_confirmation", {"email": "a@b.c"})])
    wal = FileWAL(tmp_path / "held-out.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(worker, "book it", wal=wal))
    # Strands gave the model the error and went on; the helper failed the run.
    assert isinstance(caught.value.cause, ToolFailed)
    assert isinstance(caught.value.cause.cause, ConnectionError)
    assert tool_results(worker)[-1] == "Error: ConnectionError - mail server unreachable"
    testing.assert_trip_undone_newest_first(wal, caught.value, clean=False)
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
    assert [(r["body"]["tool"], r["body"]["args"]) for r in records(wal, "STEP_COMMITTED")] == [
        ("note", {"text": "hi"}), ("memo", {"text": "ho"})]
    wal.close()


def test_patch_all_makes_tool_functions_steps_and_refuses_an_unclassified_one_before_it_runs(tmp_path: Path) -> None:
    SEEN.clear()
    patch_all({"mode": "enforce", "tools": {**TRIP_POLICY, "note": {"semantics": "REVERSIBLE"}}})

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
    assert [(r["body"]["tool"], r["body"]["args"]) for r in records(wal, "STEP_INTENT")] == [
        ("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
    # A REVERSIBLE step logs its arguments with its commit: the ToolContext and agent are not among them.
    assert [r["body"]["args"] for r in records(wal, "STEP_COMMITTED") if r["body"].get("tool") == "note"] == [{"text": "hi"}]
    assert SEEN == [("hi", "note", "Agent")]
    assert [(r["body"]["tool"], r["body"]["rule"]) for r in records(wal, "STEP_REFUSED")] == [
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


@pytest.mark.parametrize("blocking", [False, True], ids=["invoke_async", "call"])
def test_a_fleet_saga_reaches_the_threads_strands_runs_sync_tools_on(tmp_path: Path, blocking: bool) -> None:
    def tools_of(publish: Any) -> list[Any]:  # a registered callable is an ordinary @tool function
        tools = [tool(publish), send_confirmation]
        assert tools[0].tool_name == "publish_draft"
        assert list(tools[0].tool_spec["inputSchema"]["json"]["properties"]) == ["title"]
        return tools

    def run(tools: list[Any], calls: list[Any]) -> Any:  # agent(prompt): the loop on Strands' own thread
        worker = agent(tools, calls)
        return worker("write it up") if blocking else worker.invoke_async("write it up")

    assert_fleet_undone("strands", tmp_path, tools_of, run, blocking=blocking)  # a sync tool: asyncio.to_thread


def test_wrap_tool_names_the_framework_module_it_takes() -> None:
    with pytest.raises(TypeError, match=r"agent-saga-strands's wrap_tool takes strands\.tools\.decorator\.DecoratedFunctionTool, got builtins\.int; make one with @strands\.tool"):
        wrap_tool(3, semantics="REVERSIBLE")  # type: ignore[type-var]
    Foreign = type("PythonAgentTool", (), {"__module__": "strands.tools.tools"})
    with pytest.raises(TypeError, match=r"takes strands\.tools\.decorator\.DecoratedFunctionTool, got strands\.tools\.tools\.PythonAgentTool"):
        agent_saga.wrap_tool(Foreign(), semantics="REVERSIBLE")


def test_an_install_whose_strands_moved_fails_at_import_naming_the_supported_range() -> None:
    testing.assert_moved_fails_at_import("agent_saga_strands", "from strands.tools.decorator import DecoratedFunctionTool; del DecoratedFunctionTool.stream",
                                 "strands-agents<2,>=1.21.0 (installed: strands-agents 1.", "no longer has DecoratedFunctionTool._tool_func")
