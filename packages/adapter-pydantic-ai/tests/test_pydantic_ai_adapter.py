"""What Pydantic AI hands a tool besides the model's arguments, its own tool registrations, and where the adapter is found."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
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
from agent_saga import FileWAL, SagaAborted, patch_all, testing
from agent_saga.testing import DONE, TRIP, book_flight, cancelled, charge_card, records, send_confirmation


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with testing.trip_world():
        yield


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
        "book_flight": {"semantics": "COMPENSABLE", "compensate": cancelled},
        "charge_card": {"semantics": "COMPENSABLE", "compensate": testing.refunded},
        "send_confirmation": agent_saga.StepOptions("IRREVERSIBLE"),
    }) is worker
    wal = FileWAL(tmp_path / "decorated.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", deps="alice", wal=wal)
    assert seen == ["alice"]  # the RunContext reached the function ...
    assert [r["body"]["args"] for r in records(wal, "STEP_INTENT")][:2] == [{"to": "LIS"}, {"amount": 420}]  # ... not the log
    testing.assert_trip_undone_newest_first(wal, caught.value, clean=False)
    wal.close()


def test_wrap_tools_on_a_toolset_keeps_what_the_model_sees_and_refuses_unknown_names() -> None:
    toolset = FunctionToolset([book_flight, charge_card])
    before = {name: tool.tool_def for name, tool in toolset.tools.items()}
    with pytest.raises(ValueError, match=r"no tool named 'book_hotel' in this FunctionToolset \(it has 'book_flight', 'charge_card'\)"):
        wrap_tools(toolset, {"book_flight": {"semantics": "REVERSIBLE"}, "book_hotel": {"semantics": "REVERSIBLE"}})
    assert not any(wrap_tool.__self__.is_wrapped(t) for t in toolset.tools.values())  # refused before any change
    wrap_tools(toolset, {"book_flight": {"semantics": "COMPENSABLE", "compensate": cancelled}})
    assert {name: tool.tool_def for name, tool in toolset.tools.items()} == before
    assert wrap_tool.__self__.is_wrapped(toolset.tools["book_flight"])
    assert not wrap_tool.__self__.is_wrapped(toolset.tools["charge_card"])
    with pytest.raises(TypeError, match=r"wrap_tools takes a pydantic_ai FunctionToolset or Agent, got builtins\.list"):
        wrap_tools([], {})  # type: ignore[type-var]


def test_wrap_tools_finds_a_tool_in_a_toolset_the_agent_was_given(tmp_path: Path) -> None:
    booking = FunctionToolset([book_flight])
    worker = Agent(scripted([*TRIP, ("send_confirmation", {"email": "a@b.c"})]), toolsets=[booking],
                   tools=[charge_card, send_confirmation])
    wrap_tools(worker, {"book_flight": {"semantics": "COMPENSABLE", "compensate": cancelled},
                        "charge_card": {"semantics": "COMPENSABLE", "compensate": testing.refunded}})
    assert wrap_tool.__self__.is_wrapped(booking.tools["book_flight"])
    wal = FileWAL(tmp_path / "given.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(worker, "book it", wal=wal)
    assert isinstance(caught.value.cause, ConnectionError)  # an unwrapped tool's failure ends the run too
    testing.assert_trip_undone_newest_first(wal, caught.value)
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
    assert [(r["body"]["tool"], r["body"]["args"]) for r in records(wal, "STEP_COMMITTED")] == [("note", {"text": "hi"})]
    wal.close()


def test_patch_all_reaches_an_agents_decorated_tools_and_leaves_the_run_context_out(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": testing.TRIP_POLICY})
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
    assert [(r["body"]["tool"], r["body"]["args"]) for r in records(wal, "STEP_INTENT")] == [
        ("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
    testing.assert_trip_undone_newest_first(wal, caught.value)
    wal.close()


@pytest.mark.parametrize("blocking", [False, True], ids=["run", "run_sync"])
def test_a_fleet_saga_reaches_the_worker_thread_pydantic_ai_runs_sync_tools_on(tmp_path: Path, blocking: bool) -> None:
    def tools_of(publish: Any) -> list[Any]:  # registered callables are ordinary Pydantic AI tools
        tools = [Tool(publish), Tool(send_confirmation)]
        assert tools[0].name == "publish_draft" and list(tools[0].tool_def.parameters_json_schema["properties"]) == ["title"]
        return tools

    def run(tools: list[Any], calls: list[Any]) -> Any:  # run_sync runs the loop itself; a sync tool still goes to a thread
        worker = agent(tools, calls)
        return worker.run_sync("write it up") if blocking else worker.run("write it up")

    testing.assert_fleet_undone("pydantic_ai", tmp_path, tools_of, run, blocking=blocking)


def test_wrap_tool_names_the_framework_module_it_takes() -> None:
    with pytest.raises(TypeError, match=r"agent-saga-pydantic-ai's wrap_tool takes pydantic_ai\.tools\.Tool, got builtins\.int; .*wrap_tools"):
        wrap_tool(3, semantics="REVERSIBLE")  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"agent-saga-pydantic-ai's wrap_tool takes pydantic_ai\.tools\.Tool, got pydantic_ai\.toolsets\.function\.FunctionToolset"):
        agent_saga.wrap_tool(FunctionToolset([book_flight]), semantics="REVERSIBLE")


def test_an_install_whose_pydantic_ai_moved_fails_at_import_naming_the_supported_range() -> None:
    testing.assert_moved_fails_at_import("agent_saga_pydantic_ai", "from pydantic_ai.toolsets import FunctionToolset; del FunctionToolset.call_tool",
                                 "pydantic-ai-slim<3,>=1.71.0 (installed: pydantic-ai-slim 2.", "no longer has Tool.function_schema.function, FunctionSchema.call and .is_async, or FunctionToolset.call_tool(name, tool_args, ctx, tool)")



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
