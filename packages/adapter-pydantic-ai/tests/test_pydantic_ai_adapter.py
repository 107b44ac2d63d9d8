"""What Pydantic AI hands a tool besides the model's arguments, its own tool registrations, and where the adapter is found."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga_pydantic_ai import saga_run, saga_run_sync, wrap_tool, wrap_tools
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai_drive import agent, scripted

import agent_saga
from agent_saga import (
    Compensation,
    FileWAL,
    SagaAborted,
    SagaFleet,
    compensator,
    patch_all,
    saga_scope,
    unpatch_all,
)
from agent_saga.testing import assert_trip_undone

DONE: list[str] = []


@compensator("pai_test.cancel_flight")
def cancel_flight(booking: str) -> None:
    DONE.append(f"cancel {booking}")


@compensator("pai_test.refund")
def refund(charge: str) -> None:
    DONE.append(f"refund {charge}")


def book_flight(to: str) -> dict[str, str]:
    """Book a flight."""
    DONE.append(f"book {to}")
    return {"booking": f"bk-{to}"}


async def charge_card(amount: int) -> dict[str, str]:
    """Charge the card."""
    DONE.append(f"charge {amount}")
    return {"charge": f"ch-{amount}"}


def send_confirmation(email: str) -> str:
    """Send the confirmation mail."""
    raise ConnectionError("mail server unreachable")


def _cancel(r: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel_flight, handler="pai_test.cancel_flight", kwargs={"booking": r["booking"]})


def _refund(r: dict[str, str]) -> Compensation:
    return Compensation(fn=refund, handler="pai_test.refund", kwargs={"charge": r["charge"]})


TRIP = [("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]


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
    # The adapter's wrap_tool on Tools, the run ending in a third tool's failure.
    tools = [wrap_tool(Tool(book_flight), semantics="COMPENSABLE", compensate=_cancel),
             wrap_tool(Tool(charge_card), semantics="COMPENSABLE", compensate=_refund),
             wrap_tool(Tool(send_confirmation), semantics="IRREVERSIBLE")]
    wal = FileWAL(tmp_path / "held-out.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(agent(tools, [*TRIP, ("send_confirmation", {"email": "a@b.c"})]), "book it", wal=wal))
    assert isinstance(caught.value.cause, ConnectionError)
    assert DONE == ["book LIS", "charge 420", "refund ch-420", "cancel bk-LIS"]
    assert [s.tool for s in caught.value.report.compensated] == ["charge_card", "book_flight"]
    assert len(_records(wal, "STEP_COMPENSATED")) == 2
    wal.close()


def test_held_out_with_the_top_level_wrap_tool_and_a_failure_after_the_run(tmp_path: Path) -> None:
    tools = [agent_saga.wrap_tool(Tool(book_flight), semantics="COMPENSABLE", compensate=_cancel),
             agent_saga.wrap_tool(Tool(charge_card), semantics="COMPENSABLE", compensate=_refund)]
    assert [type(t) for t in tools] == [Tool, Tool]
    wal = FileWAL(tmp_path / "top-level.wal")

    def trip() -> None:
        with saga_scope(wal):
            agent(tools, TRIP).run_sync("book it")
            raise RuntimeError("the hotel is full")

    with pytest.raises(SagaAborted) as caught:
        trip()
    assert str(caught.value.cause) == "the hotel is full"
    _undone_once_newest_first(wal, caught.value)
    wal.close()


def test_wrap_tools_makes_an_agents_own_decorated_tools_steps(tmp_path: Path) -> None:
    worker = Agent(scripted([*TRIP, ("send_confirmation", {"email": "a@b.c"})]), deps_type=str)
    seen: list[str] = []

    @worker.tool_plain
    def book_flight(to: str) -> dict[str, str]:
        """Book a flight."""
        DONE.append(f"book {to}")
        return {"booking": f"bk-{to}"}

    @worker.tool
    async def charge_card(ctx: RunContext[str], amount: int) -> dict[str, str]:
        """Charge the card."""
        seen.append(ctx.deps)
        DONE.append(f"charge {amount}")
        return {"charge": f"ch-{amount}"}

    worker.tool_plain(send_confirmation)
    assert wrap_tools(worker, {
        "book_flight": {"semantics": "COMPENSABLE", "compensate": _cancel},
        "charge_card": {"semantics": "COMPENSABLE", "compensate": _refund},
        "send_confirmation": agent_saga.StepOptions("IRREVERSIBLE"),
    }) is worker
    wal = FileWAL(tmp_path / "decorated.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", deps="alice", wal=wal)
    assert seen == ["alice"]  # the RunContext reached the function ...
    assert [r["body"]["args"] for r in _records(wal, "STEP_INTENT")][:2] == [{"to": "LIS"}, {"amount": 420}]  # ... not the log
    _undone_once_newest_first(wal, caught.value, clean=False)
    wal.close()


def test_wrap_tools_on_a_toolset_keeps_what_the_model_sees_and_refuses_unknown_names() -> None:
    toolset = FunctionToolset([book_flight, charge_card])
    before = {name: tool.tool_def for name, tool in toolset.tools.items()}
    with pytest.raises(ValueError, match=r"no tool named 'book_hotel' in this FunctionToolset \(it has 'book_flight', 'charge_card'\)"):
        wrap_tools(toolset, {"book_flight": {"semantics": "REVERSIBLE"}, "book_hotel": {"semantics": "REVERSIBLE"}})
    assert not any(wrap_tool.__self__.is_wrapped(t) for t in toolset.tools.values())  # refused before any change
    wrap_tools(toolset, {"book_flight": {"semantics": "COMPENSABLE", "compensate": _cancel}})
    assert {name: tool.tool_def for name, tool in toolset.tools.items()} == before
    assert wrap_tool.__self__.is_wrapped(toolset.tools["book_flight"])
    assert not wrap_tool.__self__.is_wrapped(toolset.tools["charge_card"])
    with pytest.raises(TypeError, match=r"wrap_tools takes a pydantic_ai FunctionToolset or Agent, got builtins\.list"):
        wrap_tools([], {})  # type: ignore[type-var]


def test_wrap_tools_finds_a_tool_in_a_toolset_the_agent_was_given(tmp_path: Path) -> None:
    booking = FunctionToolset([book_flight])
    worker = Agent(scripted([*TRIP, ("send_confirmation", {"email": "a@b.c"})]), toolsets=[booking],
                   tools=[charge_card, send_confirmation])
    wrap_tools(worker, {"book_flight": {"semantics": "COMPENSABLE", "compensate": _cancel},
                        "charge_card": {"semantics": "COMPENSABLE", "compensate": _refund}})
    assert wrap_tool.__self__.is_wrapped(booking.tools["book_flight"])
    wal = FileWAL(tmp_path / "given.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", wal=wal)
    assert isinstance(caught.value.cause, ConnectionError)  # an unwrapped tool's failure ends the run too
    _undone_once_newest_first(wal, caught.value)
    wal.close()


def test_the_run_context_reaches_the_function_but_not_the_log_nor_the_schema(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    def note(ctx: RunContext[str], text: str) -> dict[str, str]:
        """Write a note for the reviewers."""
        seen.append((ctx.deps, text))
        return {"ref": text}

    tool = Tool(note)
    safe = wrap_tool(tool, semantics="REVERSIBLE")
    assert safe.tool_def == tool.tool_def and safe.takes_ctx
    assert list(safe.tool_def.parameters_json_schema["properties"]) == ["text"]
    wal = FileWAL(tmp_path / "ctx.wal")
    asyncio.run(saga_run(Agent(scripted([("note", {"text": "hi"})]), tools=[safe], deps_type=str), "go",
                         deps="bob", wal=wal))
    assert seen == [("bob", "hi")]
    assert [(r["body"]["tool"], r["body"]["args"]) for r in _records(wal, "STEP_COMMITTED")] == [("note", {"text": "hi"})]
    wal.close()


def test_patch_all_reaches_an_agents_decorated_tools_and_leaves_the_run_context_out(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": {
        "book_flight": {"semantics": "COMPENSABLE", "compensate": {"handler": "pai_test.cancel_flight", "args": {"booking": "$.booking"}}},
        "charge_card": {"semantics": "COMPENSABLE", "compensate": {"handler": "pai_test.refund", "args": {"charge": "$.charge"}}},
    }})
    worker = Agent(scripted([*TRIP, ("send_confirmation", {"email": "a@b.c"})]), deps_type=str)
    worker.tool_plain(book_flight)

    @worker.tool
    async def charge_card(ctx: RunContext[str], amount: int) -> dict[str, str]:
        """Charge the card."""
        DONE.append(f"charge {amount}")
        return {"charge": f"ch-{amount}"}

    @worker.tool_plain
    def send_confirmation(email: str) -> str:
        """Send the confirmation mail (unclassified: refused before it runs)."""
        DONE.append("mail")
        return "sent"

    wal = FileWAL(tmp_path / "patched.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", deps="carol", wal=wal)
    assert "mail" not in DONE
    assert [(r["body"]["tool"], r["body"]["args"]) for r in _records(wal, "STEP_INTENT")] == [
        ("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
    _undone_once_newest_first(wal, caught.value)
    wal.close()


@compensator("pai_fleet.release")
def release(reservation_id: str) -> None:
    DONE.append(f"release {reservation_id}")


@compensator("pai_fleet.unpublish")
def unpublish(doc_id: str) -> None:
    DONE.append(f"unpublish {doc_id}")


@pytest.mark.parametrize("blocking", [False, True], ids=["run", "run_sync"])
def test_a_fleet_saga_reaches_the_worker_thread_pydantic_ai_runs_sync_tools_on(tmp_path: Path, blocking: bool) -> None:
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
    publish = fleet.register(publish_draft, framework="pydantic_ai", name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    fleet.assert_fully_covered(["research.reserve", "writer.publish"])
    tools = [Tool(publish), Tool(send_confirmation)]  # registered callables are ordinary Pydantic AI tools
    assert tools[0].name == "publish_draft" and list(tools[0].tool_def.parameters_json_schema["properties"]) == ["title"]
    worker = agent(tools, [("publish_draft", {"title": "Q3"}), ("send_confirmation", {"email": "a@b.c"})])
    wal = FileWAL(tmp_path / "fleet.wal")

    async def pipeline() -> None:
        async with fleet.transaction(wal=wal):
            await reserve(amount=5000)
            await worker.run("write it up")

    def blocking_pipeline() -> None:  # Agent.run_sync runs the loop itself; the tool still goes to a worker thread
        with fleet.transaction(wal=wal):
            asyncio.run(reserve(amount=5000))
            worker.run_sync("write it up")

    with pytest.raises(SagaAborted) as caught:
        blocking_pipeline() if blocking else asyncio.run(pipeline())
    assert threads and threads[0] != threading.main_thread().name  # Pydantic AI's sync-tool worker thread
    assert DONE == ["reserve 5000", "publish Q3", "unpublish doc_1", "release res_1"]
    assert [s.tool for s in caught.value.report.compensated] == ["writer.publish", "research.reserve"]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()


def test_both_import_paths_and_the_framework_module_name_the_right_adapter() -> None:
    import agent_saga_pydantic_ai

    from agent_saga.adapters import pydantic_ai

    assert pydantic_ai is agent_saga_pydantic_ai
    with pytest.raises(TypeError, match=r"agent-saga-pydantic-ai's wrap_tool takes pydantic_ai\.tools\.Tool, got builtins\.int; .*wrap_tools"):
        wrap_tool(3, semantics="REVERSIBLE")  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"agent-saga-pydantic-ai's wrap_tool takes pydantic_ai\.tools\.Tool, got pydantic_ai\.toolsets\.function\.FunctionToolset"):
        agent_saga.wrap_tool(FunctionToolset([book_flight]), semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="'book_flight' is already wrapped"):
        wrap_tool(wrap_tool(Tool(book_flight), semantics="REVERSIBLE"), semantics="REVERSIBLE")


def test_an_install_whose_pydantic_ai_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from pydantic_ai.toolsets import FunctionToolset
        del FunctionToolset.call_tool   # what a refactor of Pydantic AI could do
        try:
            import agent_saga_pydantic_ai
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-pydantic-ai supports pydantic-ai-slim<3,>=1.71.0 (installed: pydantic-ai-slim 2.")
    assert ("no longer has Tool.function_schema.function, FunctionSchema.call and .is_async, or "
            "FunctionToolset.call_tool(name, tool_args, ctx, tool)") in out
    assert "pip install 'agent-saga-pydantic-ai[pydantic-ai]>=3.0.0'" in out


def test_the_example_books_the_trip_and_undoes_it_each_time_it_runs(tmp_path: Path) -> None:
    assert_trip_undone("pydantic_ai_trip", tmp_path)  # `python examples/pydantic_ai_trip.py`, as a user runs it


ANNOTATIONS = ["RunContext", "RunContext[str]", "RunContext[Any]", "'RunContext[str]'", "int", "str", "Any", None]


@settings(max_examples=60, deadline=None)
@given(first=st.sampled_from(ANNOTATIONS), name=st.sampled_from(["ctx", "context", "c", "x"]),
       postponed=st.booleans(), rest=st.integers(min_value=0, max_value=2))
def test_the_hidden_run_context_is_exactly_what_pydantic_ai_fills(first: str | None, name: str, postponed: bool,
                                                                   rest: int) -> None:
    # Pydantic AI's own rule (Tool.takes_ctx) decides which parameter it fills; the adapter must
    # hide exactly that one from the log, however the annotation is written.
    params = [f"{name}: {first}" if first else name] + [f"a{i}: int" for i in range(rest)]
    source = ("from __future__ import annotations\n" if postponed else "") + textwrap.dedent(f"""
        from typing import Any
        from pydantic_ai import RunContext
        def fn({", ".join(params)}) -> int:
            '''A tool.'''
            return 1
    """)
    space: dict[str, Any] = {}
    exec(compile(source, "<generated>", "exec"), space)
    fn = space["fn"]
    try:
        takes_ctx = Tool(fn).takes_ctx
    except Exception:  # a signature Pydantic AI itself refuses: nothing to compare
        return
    assert wrap_tool.__self__.framework_params(fn) == ((name,) if takes_ctx else ())
