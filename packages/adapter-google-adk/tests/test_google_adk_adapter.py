"""What ADK hands a tool besides the model's arguments, plain functions, the held-out scenario,
SagaFleet on ADK's executors, and where the adapter is found."""

# No `from __future__ import annotations`: ADK finds the ToolContext parameter by its evaluated annotation.

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga_google_adk import adapter, saga_run, saga_run_sync, wrap_tool
from google.adk.tools import FunctionTool, LongRunningFunctionTool, ToolContext
from google_adk_drive import POOL, new_runner, run, session

import agent_saga
from agent_saga import (
    Compensation,
    FileWAL,
    SagaAborted,
    SagaFleet,
    StepOptions,
    compensator,
    patch_all,
    saga_scope,
    unpatch_all,
)
from agent_saga.plugins.manager import plugins
from agent_saga.testing import assert_trip_undone

DONE: list[str] = []


@pytest.fixture(autouse=True)
def _clean() -> Any:
    DONE.clear()
    unpatch_all()
    yield
    unpatch_all()


def note(text: str, tool_context: ToolContext) -> dict[str, str]:
    """Write a note for the reviewers."""
    DONE.append(f"note {text} by {tool_context.agent_name}")
    return {"ref": text}


def ctx_note(text: str, ctx: ToolContext) -> dict[str, str]:
    """Write a note (the context parameter found by its annotation, not its name)."""
    DONE.append(f"note {text} by {ctx.agent_name}")
    return {"ref": text}


@compensator("adk_test.cancel")
def cancel(booking_id: str) -> None:
    DONE.append(f"cancel {booking_id}")


def book_flight(city: str) -> dict[str, str]:
    """Book a flight to the city."""
    DONE.append(f"book flight {city} on {threading.current_thread().name}")
    return {"booking_id": f"flight-{city}"}


async def book_hotel(city: str, nights: int) -> dict[str, str]:
    """Book a hotel in the city."""
    DONE.append(f"book hotel {city}x{nights}")
    return {"booking_id": f"hotel-{city}"}


def _undo(result: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel, handler="adk_test.cancel", kwargs={"booking_id": result["booking_id"]})


def _steps(wal: FileWAL) -> list[tuple[str, Any]]:
    return [(r["body"]["tool"], r["body"]["args"]) for r in wal.records() if r["type"] == "STEP_COMMITTED"]


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
    assert _steps(wal) == [(fn.__name__, {"text": "hi"})]
    wal.close()


def test_under_patch_all_the_tool_context_stays_out_of_the_log_too(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": {"note": {"semantics": "REVERSIBLE"}}})
    wal = FileWAL(tmp_path / "patched.wal")
    _saga_run([note], [("note", {"text": "hi"})], wal)  # a plain function: ADK makes it a FunctionTool
    assert DONE == ["note hi by assistant"]
    assert _steps(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_a_plain_function_becomes_the_function_tool_adk_would_make_of_it() -> None:
    safe = wrap_tool(book_hotel, semantics="COMPENSABLE", compensate=_undo)
    plain = FunctionTool(book_hotel)
    assert type(safe) is FunctionTool
    assert (safe.name, safe.description, safe._get_declaration()) == (
        plain.name, plain.description, plain._get_declaration())
    assert adapter.spec_of(safe) is not None and adapter.spec_of(plain) is None
    # ... while the top-level door keeps pointing plain functions at @agent_saga.tool.
    with pytest.raises(TypeError, match=r"plain function.*@agent_saga\.tool"):
        agent_saga.wrap_tool(book_hotel, semantics="REVERSIBLE")


def test_a_subclass_keeps_its_class_and_state() -> None:
    tool = LongRunningFunctionTool(book_flight)
    safe = wrap_tool(tool, semantics="COMPENSABLE", compensate=_undo)
    assert type(safe) is LongRunningFunctionTool
    assert safe.is_long_running and safe._get_declaration() == tool._get_declaration()
    assert tool.func is book_flight  # the original is untouched


@pytest.mark.parametrize("door", ["adapter", "top-level"])
@pytest.mark.parametrize("sync", [True, False], ids=["run", "run_async"])
def test_two_bookings_then_a_failure_undo_both_newest_first_exactly_once(tmp_path: Path, door: str, sync: bool) -> None:
    # The scenario users try first: two side-effecting tools run, then the work fails after them.
    wrap = wrap_tool if door == "adapter" else agent_saga.wrap_tool
    tools = [wrap(FunctionTool(book_flight), semantics="COMPENSABLE", compensate=_undo),
             wrap(FunctionTool(book_hotel), semantics="COMPENSABLE", compensate=_undo)]
    assert [type(t) for t in tools] == [FunctionTool, FunctionTool]
    wal = FileWAL(tmp_path / "trip.wal")
    runner = new_runner(tools, [("book_flight", {"city": "Oslo"}), ("book_hotel", {"city": "Oslo", "nights": 2})])
    with pytest.raises(SagaAborted) as caught, saga_scope(wal):
        run(runner, sync=sync)
        raise RuntimeError("payment declined")
    assert [d.split(" on ")[0] for d in DONE] == [
        "book flight Oslo", "book hotel Oslox2", "cancel hotel-Oslo", "cancel flight-Oslo"]
    assert [s.tool for s in caught.value.report.compensated] == ["book_hotel", "book_flight"]
    assert [r["step"] for r in wal.records() if r["type"] == "STEP_COMPENSATED"] == [2, 1]
    assert caught.value.report.clean and str(caught.value.cause) == "payment declined"
    wal.close()


@pytest.mark.parametrize("sync", [True, False], ids=["run", "run_async"])
def test_the_fleet_carries_one_saga_onto_adk_s_tool_executor(tmp_path: Path, sync: bool) -> None:
    fleet = SagaFleet("trip")
    flight = fleet.register(book_flight, framework="google_adk", semantics="COMPENSABLE", compensate=cancel)
    hotel = fleet.register(book_hotel, framework="google_adk", semantics="COMPENSABLE", compensate=cancel)
    fleet.assert_fully_covered(["book_flight", "book_hotel"])

    def fail(city: str) -> str:
        """Charge the card."""
        raise ConnectionError("payment service unreachable")

    # The registered callables go into ADK as its own tools (same name and declaration).
    tools = [FunctionTool(flight), FunctionTool(hotel), FunctionTool(fail)]
    assert tools[0]._get_declaration() == FunctionTool(book_flight)._get_declaration()
    calls = [("book_flight", {"city": "Rome"}), ("book_hotel", {"city": "Rome", "nights": 1}), ("fail", {"city": "Rome"})]
    runner = new_runner(tools, calls)
    wal = FileWAL(tmp_path / "fleet.wal")
    with pytest.raises(SagaAborted) as caught, fleet.transaction(wal=wal):
        run(runner, sync=sync, run_config=POOL)  # sync tools on ADK's own executor threads
    assert DONE[0].startswith("book flight Rome on adk_tool_executor")  # ADK's real sync-tool path
    assert DONE[1:] == ["book hotel Romex1", "cancel hotel-Rome", "cancel flight-Rome"]
    assert isinstance(caught.value.cause, ConnectionError)
    assert [s.tool for s in caught.value.report.compensated] == ["book_hotel", "book_flight"]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()


def test_saga_run_awaits_the_run_and_a_tool_error_answered_by_a_callback_still_unwinds(tmp_path: Path) -> None:
    def fail(city: str) -> str:
        """Charge the card."""
        raise ConnectionError("payment service unreachable")

    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=_undo),
             wrap_tool(fail, semantics="IRREVERSIBLE")]
    runner = new_runner(tools, [("book_flight", {"city": "Lima"}), ("fail", {"city": "Lima"})], errors_as_results=True)
    wal = FileWAL(tmp_path / "async.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(runner, "go", user_id="user", session_id=session(runner), wal=wal))
    assert type(caught.value.cause).__name__ == "ToolFailed"  # ADK answered the model and went on
    assert DONE[-1] == "cancel flight-Lima"
    wal.close()


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    plugins().register(adapter, "google_adk")
    wrapped = plugins().wrap_tool(FunctionTool(book_flight), StepOptions("REVERSIBLE"))
    assert type(wrapped) is FunctionTool and adapter.spec_of(wrapped).name == "book_flight"
    assert plugins().wrap_tool(book_flight, StepOptions("REVERSIBLE")) is None  # plain functions: only this wrap_tool
    assert plugins().wrap_tool(object(), StepOptions("REVERSIBLE")) is None


def test_both_import_paths_name_the_right_adapter_and_other_tools_are_refused() -> None:
    import agent_saga_google_adk
    from google.adk.tools import AgentTool  # an ADK tool that is not a function

    from agent_saga.adapters import google_adk

    assert google_adk is agent_saga_google_adk
    with pytest.raises(TypeError, match=r"agent-saga-google-adk's wrap_tool takes google\.adk\.tools\.function_tool\.FunctionTool, "
                                        r"got builtins\.int; make one with google\.adk\.tools\.FunctionTool\(fn\)"):
        wrap_tool(3, semantics="REVERSIBLE")
    agent = new_runner([], []).agent
    with pytest.raises(TypeError, match=r"got google\.adk\.tools\.agent_tool\.AgentTool"):
        agent_saga.wrap_tool(AgentTool(agent), semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(wrap_tool(book_flight, semantics="REVERSIBLE"), semantics="REVERSIBLE")


def test_an_install_whose_adk_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from google.adk.tools import FunctionTool
        del FunctionTool._invoke_callable   # what a refactor of ADK could do
        try:
            import agent_saga_google_adk
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-google-adk supports google-adk<2.14,>=2.10.0 (installed: google-adk 2.13.")
    assert "no longer has FunctionTool.func, FunctionTool._ignore_params or FunctionTool._invoke_callable" in out
    assert "pip install 'agent-saga-google-adk[google-adk]>=3.0.0'" in out


def test_the_example_books_the_trip_and_undoes_it_each_time_it_runs(tmp_path: Path) -> None:
    assert_trip_undone("google_adk_trip", tmp_path)  # `python examples/google_adk_trip.py`, as a user runs it
