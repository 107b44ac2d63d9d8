"""What Agno hands a tool besides the model's arguments, plain functions and @tool, a run Agno
reports as failed, the held-out scenario, SagaFleet on Agno's worker threads, where the adapter is found."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_agno import RunFailed, adapter, saga_run, saga_run_sync, wrap_tool
from agno.agent import Agent
from agno.models.response import ModelResponse
from agno.run import RunContext
from agno.tools import Toolkit, tool
from agno.tools.function import Function
from agno_drive import ScriptedModel, new_agent, run

import agent_saga
from agent_saga import FileWAL, SagaAborted, patch_all, testing
from agent_saga.testing import DONE, TRIP, assert_wrap_tool_hook, book_flight, cancelled, committed, refunded


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with testing.trip_world():
        yield


def book_car(city: str) -> dict[str, str]:
    """Rent a car in the city."""
    DONE.append(f"book car {city}")
    return {"booking": f"car-{city}"}


def charge_card(amount: int) -> dict[str, str]:
    """Charge the card (the trip's, sync: Agno's run() refuses an async tool)."""
    DONE.append(f"charge {amount}")
    return {"charge": f"ch-{amount}"}


def note(text: str, run_context: RunContext, agent: Agent) -> dict[str, str]:
    """Write a note for the reviewers."""
    DONE.append(f"note {text} by {agent.name} in {type(run_context).__name__}")
    return {"ref": text}


def _model_sees(fn: Function) -> dict[str, Any]:
    prepared = fn.model_copy(deep=True)
    prepared.process_entrypoint()
    return prepared.to_dict()  # type: ignore[no-any-return]


def test_the_run_context_and_agent_reach_the_function_but_not_the_log_nor_the_schema(tmp_path: Path) -> None:
    safe = wrap_tool(note, semantics="REVERSIBLE")
    assert _model_sees(safe) == _model_sees(Function.from_callable(note))
    assert list(_model_sees(safe)["parameters"]["properties"]) == ["text"]
    wal = FileWAL(tmp_path / "context.wal")
    saga_run_sync(new_agent([safe], [("note", {"text": "hi"})]), "go", wal=wal)
    assert DONE == ["note hi by assistant in RunContext"]
    assert committed(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_under_patch_all_the_run_context_stays_out_of_the_log_too(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": {"note": {"semantics": "REVERSIBLE"}}})
    wal = FileWAL(tmp_path / "patched.wal")
    saga_run_sync(new_agent([note], [("note", {"text": "hi"})]), "go", wal=wal)  # a plain function
    assert DONE == ["note hi by assistant in RunContext"]
    assert committed(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_under_patch_all_a_toolkit_s_functions_are_policed_too(tmp_path: Path) -> None:
    class Travel(Toolkit):
        def __init__(self) -> None:
            super().__init__(name="travel", tools=[self.book_car])

        def book_car(self, city: str) -> dict[str, str]:
            """Rent a car in the city."""
            return book_car(city)

    patch_all({"mode": "enforce", "tools": {}})  # book_car is not in the policy
    wal = FileWAL(tmp_path / "toolkit.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(new_agent([Travel()], [("book_car", {"city": "Oslo"})]), "go", wal=wal)
    assert DONE == []  # refused before it ran
    assert [(r["body"]["tool"], r["body"]["rule"]) for r in wal.records() if r["type"] == "STEP_REFUSED"] == [
        ("book_car", "policy.unclassified")]
    assert type(caught.value.cause).__name__ == "ToolFailed"
    wal.close()


def test_a_plain_function_and_a_decorated_one_keep_what_the_model_sees_and_their_settings() -> None:
    safe = wrap_tool(testing.charge_card, semantics="COMPENSABLE", compensate=refunded)
    assert type(safe) is Function and _model_sees(safe) == _model_sees(Function.from_callable(testing.charge_card))
    decorated = tool(name="rent", description="Rent a car.", show_result=True, instructions="Only in Europe.")(book_car)
    wrapped = wrap_tool(decorated, semantics="COMPENSABLE", compensate=cancelled)
    assert (wrapped.name, wrapped.show_result, wrapped.instructions) == ("rent", True, "Only in Europe.")
    assert _model_sees(wrapped) == _model_sees(decorated)
    assert adapter.spec_of(wrapped) is not None and adapter.spec_of(decorated) is None
    assert adapter.spec_of(wrapped).name == "rent"  # type: ignore[union-attr]
    # ... while the top-level door keeps pointing plain functions at @agent_saga.tool.
    with pytest.raises(TypeError, match=r"plain function.*@agent_saga\.tool"):
        agent_saga.wrap_tool(testing.charge_card, semantics="REVERSIBLE")


@pytest.mark.parametrize("door", ["adapter", "top-level"])
@pytest.mark.parametrize("sync", [True, False], ids=["run", "arun"])
def test_two_bookings_then_a_failure_undo_both_newest_first_exactly_once(tmp_path: Path, door: str, sync: bool) -> None:
    # The scenario users try first: two side-effecting tools run, then the work fails after them.
    wrap = wrap_tool if door == "adapter" else agent_saga.wrap_tool
    tools = [wrap(Function.from_callable(book_flight), semantics="COMPENSABLE", compensate=cancelled),
             wrap(Function.from_callable(charge_card), semantics="COMPENSABLE", compensate=refunded)]
    assert [type(t) for t in tools] == [Function, Function]
    testing.assert_trip_failing_after_the_run_undone(tmp_path, lambda: run(new_agent(tools, TRIP), sync=sync))


class FailingModel(ScriptedModel):
    """A model provider that goes down after the scripted calls."""

    def _next(self) -> ModelResponse:
        if self.turn >= len(self.calls):
            raise ConnectionError("model provider unreachable")
        return super()._next()


@pytest.mark.parametrize("sync", [True, False], ids=["run", "arun"])
def test_a_run_agno_reports_as_failed_is_unwound_not_committed(tmp_path: Path, sync: bool) -> None:
    # Agno catches the failure and returns RunOutput(status=error): without the helper's check
    # the saga around it would commit both bookings.
    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=cancelled),
             wrap_tool(charge_card, semantics="COMPENSABLE", compensate=refunded)]
    agent = Agent(model=FailingModel(calls=TRIP), tools=tools, telemetry=False)
    wal = FileWAL(tmp_path / "failed.wal")
    with pytest.raises(SagaAborted) as caught:
        if sync:
            saga_run_sync(agent, "go", wal=wal)
        else:
            asyncio.run(saga_run(agent, "go", wal=wal))
    assert isinstance(caught.value.cause, RunFailed)
    assert str(caught.value.cause) == "the agno run ended with status error: model provider unreachable"
    testing.assert_trip_undone_newest_first(wal, caught.value)
    wal.close()


def test_the_fleet_carries_one_saga_onto_agno_s_worker_thread(tmp_path: Path) -> None:
    def tools_of(publish: Any) -> list[Function]:  # the registered callable goes into Agno as its own tool
        tools = [Function.from_callable(publish), Function.from_callable(testing.send_confirmation)]
        assert _model_sees(tools[0]) == _model_sees(Function.from_callable(publish.__wrapped__))  # same name and schema
        return tools

    # Agno gives the model the mail's error and goes on; a sync tool runs on Agno's worker thread.
    testing.assert_fleet_undone("agno", tmp_path, tools_of, lambda tools, calls: new_agent(tools, calls).arun("go", stream=False))


def test_the_wrapped_copy_owns_its_schema_and_the_helpers_refuse_to_stream(tmp_path: Path) -> None:
    original = Function(name="book_car", entrypoint=book_car, parameters={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    safe = wrap_tool(original, semantics="REVERSIBLE")
    safe.process_entrypoint()  # writes into the schema (additionalProperties) of the tool it processes
    assert "additionalProperties" not in original.parameters
    with pytest.raises(ValueError, match=r"leave out stream=True"):
        saga_run_sync(new_agent([safe], []), "go", wal=FileWAL(tmp_path / "stream.wal"), stream=True)


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    assert_wrap_tool_hook("agno", Function.from_callable(book_flight), "book_flight", plain=book_flight)


def test_other_tools_are_refused_naming_what_wrap_tool_takes() -> None:
    with pytest.raises(TypeError, match=r"agent-saga-agno's wrap_tool takes agno\.tools\.function\.Function, "
                                        r"got builtins\.int; make one with @agno\.tools\.tool"):
        wrap_tool(3, semantics="REVERSIBLE")
    with pytest.raises(TypeError, match=r"agno tool 'external' has no entrypoint"):
        wrap_tool(Function(name="external"), semantics="REVERSIBLE")


def test_an_install_whose_agno_moved_fails_at_import_naming_the_supported_range() -> None:
    testing.assert_moved_fails_at_import("agent_saga_agno", "from agno.tools.function import Function; del Function.process_entrypoint",
                                 "agno<3.2,>=2.9.0 (installed: agno 3.1.", "no longer has Function.entrypoint, Function._framework_params, Function.process_entrypoint")
