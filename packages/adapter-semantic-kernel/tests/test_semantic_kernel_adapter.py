"""Plugins, kernel.invoke, and a kernel without the filter."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_saga_semantic_kernel import install, saga_invoke, saga_run, wrap_plugin, wrap_tool
from semantic_kernel import Kernel
from semantic_kernel.functions import KernelPlugin, kernel_function
from sk_drive import PLUGIN, ScriptedChat, _turns

from agent_saga import (
    BoundaryRequired,
    Compensation,
    FileWAL,
    SagaAborted,
    StepOptions,
    compensator,
    saga_scope,
)
from agent_saga.plugins.manager import plugins

WORLD: list[str] = []


@compensator("sk_test.drop")
def drop(ref: str) -> None:
    WORLD.append(f"drop {ref}")


def _undo(result: Any) -> Compensation:
    return Compensation(fn=drop, handler="sk_test.drop", kwargs={"ref": result["ref"]})


class Warehouse:
    """A class plugin, the way Semantic Kernel users write them."""

    @kernel_function(name="reserve_stock", description="Reserve stock for an order.")
    def reserve_stock(self, sku: str) -> dict[str, Any]:
        WORLD.append(f"reserve {sku}")
        return {"ref": f"stock-{sku}"}

    @kernel_function(name="book_courier", description="Book a courier.")
    async def book_courier(self, city: str) -> dict[str, Any]:
        WORLD.append(f"courier {city}")
        return {"ref": f"courier-{city}"}

    @kernel_function(name="charge", description="Charge the customer.")
    def charge(self, amount: int) -> str:
        raise ConnectionError("payment gateway unreachable")


@pytest.fixture(autouse=True)
def _world() -> None:
    WORLD.clear()


def _plugin() -> KernelPlugin:
    return wrap_plugin(KernelPlugin.from_object(PLUGIN, Warehouse()), {
        "reserve_stock": {"semantics": "COMPENSABLE", "compensate": _undo},
        "book_courier": {"semantics": "COMPENSABLE", "compensate": _undo},
        "charge": {"semantics": "IRREVERSIBLE"},
    })


def test_a_wrapped_class_plugin_unwinds_newest_first_when_its_last_function_fails(tmp_path: Path) -> None:
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior

    agent = ChatCompletionAgent(
        name="shop", instructions="x", plugins=[_plugin()],
        service=ScriptedChat(ai_model_id="scripted", script=_turns(
            [("reserve_stock", {"sku": "a1"}), ("book_courier", {"city": "Oslo"}), ("charge", {"amount": 5})])),
        function_choice_behavior=FunctionChoiceBehavior.Auto())
    wal = FileWAL(tmp_path / "sk.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(agent, messages="ship it", wal=wal))
    assert WORLD == ["reserve a1", "courier Oslo", "drop courier-Oslo", "drop stock-a1"]
    assert [s.tool for s in caught.value.report.compensated] == ["book_courier", "reserve_stock"]
    assert isinstance(caught.value.cause.cause, ConnectionError)  # type: ignore[attr-defined]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()


def test_kernel_invoke_is_a_step_through_the_filter(tmp_path: Path) -> None:
    kernel = Kernel()
    kernel.add_plugin(_plugin())
    wal = FileWAL(tmp_path / "invoke.wal")
    result = asyncio.run(saga_invoke(kernel, kernel.get_function(PLUGIN, "reserve_stock"), sku="b2", wal=wal))
    assert result.value == {"ref": "stock-b2"}
    assert [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_INTENT"] == ["reserve_stock"]
    wal.close()


def test_a_kernel_without_the_filter_refuses_a_wrapped_function_inside_a_saga(tmp_path: Path) -> None:
    kernel = Kernel()
    kernel.add_plugin(_plugin())
    function = kernel.get_function(PLUGIN, "reserve_stock")
    wal = FileWAL(tmp_path / "nofilter.wal")

    async def main() -> None:
        async with saga_scope(wal):
            await kernel.invoke(function, sku="c3")

    with pytest.raises(SagaAborted) as caught:
        asyncio.run(main())
    assert isinstance(caught.value.cause.__cause__, BoundaryRequired)  # inside SK's KernelInvokeException
    assert "install(kernel)" in str(caught.value.cause.__cause__)
    assert WORLD == []  # the effect never ran unprotected
    # outside any saga the same kernel just calls through
    assert asyncio.run(kernel.invoke(function, sku="d4")).value == {"ref": "stock-d4"}
    assert install(kernel) is kernel and install(kernel).function_invocation_filters.__len__() == 1
    wal.close()


def test_wrap_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match="kernel function"):
        wrap_tool(len, semantics="REVERSIBLE")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no function named"):
        wrap_plugin(KernelPlugin.from_object(PLUGIN, Warehouse()), {"refund": {"semantics": "IRREVERSIBLE"}})
    wrapped = _plugin().functions["charge"]
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(wrapped, semantics="IRREVERSIBLE")  # type: ignore[arg-type]


def test_the_wrap_tool_hook_and_the_namespace_import() -> None:
    import agent_saga_semantic_kernel
    import agent_saga_semantic_kernel.plugin as plugin

    from agent_saga.adapters import semantic_kernel

    assert semantic_kernel is agent_saga_semantic_kernel
    plugins().register(plugin, "semantic_kernel")
    function = KernelPlugin.from_object(PLUGIN, Warehouse()).functions["charge"]
    wrapped = plugins().wrap_tool(function, StepOptions("IRREVERSIBLE"), "charge")
    assert type(wrapped) is type(function) and wrapped.metadata == function.metadata
    assert plugins().wrap_tool(object(), StepOptions("REVERSIBLE")) is None
