"""The run context, hand-built tools, and what the adapter takes from the SDK beyond its API (_compat)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_openai_agents import saga_run, wrap_tool
from agents import FunctionTool, RunContextWrapper, function_tool
from test_openai_agents_conformance import agent

from agent_saga import FileWAL, SagaAborted, ToolFailed, patch_all, unpatch_all
from agent_saga.testing import DONE, REF_UNDO, Call, assert_moved_fails_at_import, cancel_ref, trip_world


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with trip_world():
        yield


@function_tool
def order(ctx: RunContextWrapper[Any], item: str) -> dict[str, str]:
    """Place an order."""
    DONE.append(f"order {item} with {type(ctx).__name__}")
    return {"ref": f"o-{item}"}


async def _reserve(ctx: Any, raw: str) -> dict[str, str]:
    DONE.append(f"reserve {json.loads(raw)['item']}")
    return {"ref": "r-1"}


RESERVE = FunctionTool(  # hand-built: no Python function behind it
    name="reserve", description="Reserve stock.", on_invoke_tool=_reserve,
    params_json_schema={"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"],
                        "additionalProperties": False},
)


@function_tool
def ship(order: str) -> str:
    """Ship it."""
    raise RuntimeError("carrier down")


def test_the_run_context_reaches_the_function_but_not_the_log(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "ctx.wal")
    safe = wrap_tool(order, semantics="COMPENSABLE", compensate=cancel_ref)
    assert safe.params_json_schema == order.params_json_schema
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(agent([safe, wrap_tool(ship, semantics="IRREVERSIBLE")],
                                   [Call("order", {"item": "x"}), Call("ship", {"order": "o-x"})]), "go", wal=wal))
    assert isinstance(caught.value.cause, ToolFailed)
    assert DONE == ["order x with ToolContext", "cancel o-x"]
    intent = next(r["body"] for r in wal.records() if r["type"] == "STEP_INTENT")
    assert (intent["tool"], intent["args"]) == ("order", {"item": "x"})
    wal.close()


def test_under_patch_all_a_sync_function_is_the_step_with_the_sdks_context_and_arguments(tmp_path: Path) -> None:
    # The step runs the function itself on the SDK's worker thread (so a cancelled call stays in
    # flight): the run context still reaches it and the log still holds the model's arguments.
    patch_all({"mode": "enforce", "tools": {
        "order": {"semantics": "COMPENSABLE", "compensate": REF_UNDO},
        "ship": {"semantics": "IRREVERSIBLE"}}})
    wal = FileWAL(tmp_path / "patched.wal")
    try:
        with pytest.raises(SagaAborted):
            asyncio.run(saga_run(agent([order, ship], [Call("order", {"item": "x"}), Call("ship", {"order": "o-x"})]),
                                 "go", wal=wal))
    finally:
        unpatch_all()
    assert DONE == ["order x with ToolContext", "cancel o-x"]
    intents = [r["body"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    assert [(i["tool"], i["args"]) for i in intents] == [("order", {"item": "x"}), ("ship", {"order": "o-x"})]
    wal.close()


def test_a_hand_built_function_tool_is_a_step_and_is_undone(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "hand.wal")
    safe = wrap_tool(RESERVE, semantics="COMPENSABLE", compensate=cancel_ref)
    assert type(safe) is FunctionTool and (safe.name, safe.params_json_schema) == (RESERVE.name, RESERVE.params_json_schema)
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(safe, semantics="COMPENSABLE", compensate=cancel_ref)
    with pytest.raises(SagaAborted):
        asyncio.run(saga_run(agent([safe, wrap_tool(ship, semantics="IRREVERSIBLE")],
                                   [Call("reserve", {"item": "y"}), Call("ship", {"order": "r-1"})]), "go", wal=wal))
    assert DONE == ["reserve y", "cancel r-1"]
    intent = next(r["body"] for r in wal.records() if r["type"] == "STEP_INTENT")
    assert (intent["tool"], intent["args"]) == ("reserve", {"item": "y"})
    wal.close()


def test_an_install_whose_sdk_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_openai_agents", "import agents.tool; rename_on_init(agents.tool._FailureHandlingFunctionToolInvoker, '_invoke_tool_impl')",
                                 "openai-agents<0.25,>=0.21.0 (installed: openai-agents 0.24", "no longer runs a @function_tool through agents.tool._FailureHandlingFunctionToolInvoker")
