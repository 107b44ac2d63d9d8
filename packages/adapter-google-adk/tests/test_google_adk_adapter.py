"""What ADK hands a tool besides the model's arguments, plain functions, the held-out scenario,
SagaFleet on ADK's executors, and where the adapter is found."""

# No `from __future__ import annotations`: ADK finds the ToolContext parameter by its evaluated annotation.

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_google_adk import adapter, saga_run, saga_run_sync, wrap_tool
from google.adk.tools import FunctionTool, LongRunningFunctionTool, ToolContext
from google_adk_drive import POOL, new_runner, run, session

import agent_saga
from agent_saga import FileWAL, SagaAborted, patch_all, testing
from agent_saga.testing import (
    DONE,
    TRIP,
    assert_wrap_tool_hook,
    book_flight,
    cancelled,
    charge_card,
    committed,
    refunded,
)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with testing.trip_world():
        yield


def note(text: str, tool_context: ToolContext) -> dict[str, str]:
    """Write a note for the reviewers."""
    DONE.append(f"note {text} by {tool_context.agent_name}")
    return {"ref": text}


def ctx_note(text: str, ctx: ToolContext) -> dict[str, str]:
    """Write a note (the context parameter found by its annotation, not its name)."""
    DONE.append(f"note {text} by {ctx.agent_name}")
    return {"ref": text}


def _saga_run(tools: list[Any], calls: list[tuple[str, dict[str, Any]]], wal: FileWAL, **kw: Any) -> Any:
    runner = new_runner(tools, calls)
    return saga_run_sync(runner, "go", user_id="user", session_id=session(runner), wal=wal, **kw)


@pytest.mark.parametrize("fn", [note, ctx_note], ids=["by-name", "by-annotation"])
def test_the_tool_context_reaches_the_function_but_not_the_log_nor_the_declaration(tmp_path: Path, fn: Any) -> None:
    tool = FunctionTool(fn)
    safe = wrap_tool(tool, semantics="REVERSIBLE")
    declared = safe._get_declaration()
    assert declared == tool._get_declaration()
    assert list(declared.parameters_json_schema["properties"]) == ["text"]
    wal = FileWAL(tmp_path / "context.wal")
    _saga_run([safe], [(fn.__name__, {"text": "hi"})], wal)
    assert DONE == ["note hi by assistant"]
    assert committed(wal) == [(fn.__name__, {"text": "hi"})]
    wal.close()


def test_under_patch_all_the_tool_context_stays_out_of_the_log_too(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": {"note": {"semantics": "REVERSIBLE"}}})
    wal = FileWAL(tmp_path / "patched.wal")
    _saga_run([note], [("note", {"text": "hi"})], wal)  # a plain function: ADK makes it a FunctionTool
    assert DONE == ["note hi by assistant"]
    assert committed(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_a_plain_function_becomes_the_function_tool_adk_would_make_of_it() -> None:
    safe = wrap_tool(charge_card, semantics="COMPENSABLE", compensate=refunded)
    plain = FunctionTool(charge_card)
    assert type(safe) is FunctionTool
    assert (safe.name, safe.description, safe._get_declaration()) == (
        plain.name, plain.description, plain._get_declaration())
    assert adapter.spec_of(safe) is not None and adapter.spec_of(plain) is None
    # ... while the top-level door keeps pointing plain functions at @agent_saga.tool.
    with pytest.raises(TypeError, match=r"plain function.*@agent_saga\.tool"):
        agent_saga.wrap_tool(charge_card, semantics="REVERSIBLE")


def test_a_subclass_keeps_its_class_and_state() -> None:
    tool = LongRunningFunctionTool(book_flight)
    safe = wrap_tool(tool, semantics="COMPENSABLE", compensate=cancelled)
    assert type(safe) is LongRunningFunctionTool
    assert safe.is_long_running and safe._get_declaration() == tool._get_declaration()
    assert tool.func is book_flight  # the original is untouched


@pytest.mark.parametrize("door", ["adapter", "top-level"])
@pytest.mark.parametrize("sync", [True, False], ids=["run", "run_async"])
def test_two_bookings_then_a_failure_undo_both_newest_first_exactly_once(tmp_path: Path, door: str, sync: bool) -> None:
    # The scenario users try first: two side-effecting tools run, then the work fails after them.
    wrap = wrap_tool if door == "adapter" else agent_saga.wrap_tool
    tools = [wrap(FunctionTool(book_flight), semantics="COMPENSABLE", compensate=cancelled),
             wrap(FunctionTool(charge_card), semantics="COMPENSABLE", compensate=refunded)]
    assert [type(t) for t in tools] == [FunctionTool, FunctionTool]
    testing.assert_trip_failing_after_the_run_undone(tmp_path, lambda: run(new_runner(tools, TRIP), sync=sync))


@pytest.mark.parametrize("sync", [True, False], ids=["run", "run_async"])
def test_the_fleet_carries_one_saga_onto_adk_s_tool_executor(tmp_path: Path, sync: bool) -> None:
    def tools_of(publish: Any) -> list[FunctionTool]:  # the registered callable goes into ADK as its own tool
        tools = [FunctionTool(publish), FunctionTool(testing.send_confirmation)]
        assert tools[0]._get_declaration() == FunctionTool(publish.__wrapped__)._get_declaration()
        return tools

    def runs(tools: list[FunctionTool], calls: list[Any]) -> Any:  # sync tools on ADK's own executor threads
        return run(new_runner(tools, calls), sync=sync, run_config=POOL)

    err, threads = testing.assert_fleet_undone("google_adk", tmp_path, tools_of, runs, blocking=True)
    assert threads[0].startswith("adk_tool_executor")  # ADK's real sync-tool path
    assert isinstance(err.cause, ConnectionError)  # the mail's failure ended ADK's run


def test_saga_run_awaits_the_run_and_a_tool_error_answered_by_a_callback_still_unwinds(tmp_path: Path) -> None:
    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=cancelled),
             wrap_tool(testing.send_confirmation, semantics="IRREVERSIBLE")]
    runner = new_runner(tools, [TRIP[0], ("send_confirmation", {"email": "a@b.c"})], errors_as_results=True)
    wal = FileWAL(tmp_path / "async.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(runner, "go", user_id="user", session_id=session(runner), wal=wal))
    assert type(caught.value.cause).__name__ == "ToolFailed"  # ADK answered the model and went on
    assert DONE == ["book LIS", "cancel bk-LIS"]
    wal.close()


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    assert_wrap_tool_hook("google_adk", FunctionTool(book_flight), "book_flight", plain=book_flight)


def test_other_tools_are_refused_naming_what_wrap_tool_takes() -> None:
    from google.adk.tools import AgentTool  # an ADK tool that is not a function

    with pytest.raises(TypeError, match=r"agent-saga-google-adk's wrap_tool takes google\.adk\.tools\.function_tool\.FunctionTool, "
                                        r"got builtins\.int; make one with google\.adk\.tools\.FunctionTool\(fn\)"):
        wrap_tool(3, semantics="REVERSIBLE")
    agent = new_runner([], []).agent
    with pytest.raises(TypeError, match=r"got google\.adk\.tools\.agent_tool\.AgentTool"):
        agent_saga.wrap_tool(AgentTool(agent), semantics="REVERSIBLE")


def test_an_install_whose_adk_moved_fails_at_import_naming_the_supported_range() -> None:
    testing.assert_moved_fails_at_import("agent_saga_google_adk", "from google.adk.tools import FunctionTool; del FunctionTool._invoke_callable",
                                 "google-adk<2.14,>=2.10.0 (installed: google-adk 2.13.", "no longer has FunctionTool.func, FunctionTool._ignore_params or FunctionTool._invoke_callable")
