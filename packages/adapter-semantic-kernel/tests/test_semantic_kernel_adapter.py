"""Plugins, kernel.invoke, a kernel with and without the filter, and what the adapter takes from SK."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_semantic_kernel import (
    adapter,
    install,
    saga_filter,
    saga_invoke,
    saga_run,
    wrap_plugin,
    wrap_tool,
)
from semantic_kernel import Kernel
from semantic_kernel.filters.filter_types import FilterTypes
from semantic_kernel.functions import KernelPlugin, kernel_function
from sk_drive import PLUGIN, ScriptedChat, _turns

from agent_saga import FileWAL, SagaAborted, StepOptions, saga_scope
from agent_saga.engine.saga import Saga
from agent_saga.plugins.manager import plugins
from agent_saga.testing import DONE, assert_moved_fails_at_import, cancel_ref, trip_world


class Warehouse:
    """A class plugin, the way Semantic Kernel users write them."""

    @kernel_function(name="reserve_stock", description="Reserve stock for an order.")
    def reserve_stock(self, sku: str) -> dict[str, Any]:
        DONE.append(f"reserve {sku}")
        return {"ref": f"stock-{sku}"}

    @kernel_function(name="book_courier", description="Book a courier.")
    async def book_courier(self, city: str) -> dict[str, Any]:
        DONE.append(f"courier {city}")
        return {"ref": f"courier-{city}"}

    @kernel_function(name="charge", description="Charge the customer.")
    def charge(self, amount: int) -> str:
        raise ConnectionError("payment gateway unreachable")


@pytest.fixture(autouse=True)
def _world() -> Iterator[None]:
    with trip_world():
        yield


def _plugin() -> KernelPlugin:
    return wrap_plugin(KernelPlugin.from_object(PLUGIN, Warehouse()), {
        "reserve_stock": {"semantics": "COMPENSABLE", "compensate": cancel_ref},
        "book_courier": {"semantics": "COMPENSABLE", "compensate": cancel_ref},
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
    assert DONE == ["reserve a1", "courier Oslo", "cancel courier-Oslo", "cancel stock-a1"]
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


def _intents(wal: FileWAL) -> list[str]:
    return [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_INTENT"]


def test_a_kernel_without_the_filter_still_makes_a_wrapped_function_a_step(tmp_path: Path) -> None:
    kernel = Kernel()
    kernel.add_plugin(_plugin())
    reserve = kernel.get_function(PLUGIN, "reserve_stock")
    wal = FileWAL(tmp_path / "nofilter.wal")

    async def main() -> None:
        async with saga_scope(wal):
            await kernel.invoke(reserve, sku="c3")
            raise RuntimeError("the step after the call failed")

    with pytest.raises(SagaAborted) as caught:
        asyncio.run(main())
    assert DONE == ["reserve c3", "cancel stock-c3"]
    assert [s.tool for s in caught.value.report.compensated] == ["reserve_stock"]
    assert kernel.function_invocation_filters == []  # nothing was installed behind the user's back
    # outside any saga the same kernel just calls through
    assert asyncio.run(kernel.invoke(reserve, sku="d4")).value == {"ref": "stock-d4"}
    assert DONE[-1] == "reserve d4" and len(_intents(wal)) == 1
    wal.close()


@pytest.mark.parametrize("filtered", [False, True], ids=["method", "filter"])
def test_with_the_filter_the_step_awaits_the_log_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filtered: bool
) -> None:
    # A sync kernel function runs on the event loop. Without the filter its step is the
    # method's and blocks the loop on the log; with it the filter's, which awaits.
    drivers: list[str] = []
    for driver in ("execute", "execute_sync"):
        original = getattr(Saga, driver)
        monkeypatch.setattr(Saga, driver, lambda saga, *a, _o=original, _d=driver, **k: drivers.append(_d) or _o(saga, *a, **k))
    kernel = Kernel()
    kernel.add_plugin(_plugin())
    if filtered:
        install(kernel)
        kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, saga_filter)  # by hand as well: still one step
    wal = FileWAL(tmp_path / "driver.wal")

    async def main() -> None:
        async with saga_scope(wal):
            await kernel.invoke(kernel.get_function(PLUGIN, "reserve_stock"), sku="e5")

    asyncio.run(main())
    assert drivers == (["execute"] if filtered else ["execute_sync"])
    assert _intents(wal) == ["reserve_stock"] and DONE == ["reserve e5"]
    wal.close()


def test_wrap_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match=r"takes semantic_kernel\.functions\.kernel_function_from_method\.KernelFunctionFromMethod, got builtins\.builtin_function_or_method; make one with @kernel_function"):
        wrap_tool(len, semantics="REVERSIBLE")
    with pytest.raises(KeyError, match="no function named"):
        wrap_plugin(KernelPlugin.from_object(PLUGIN, Warehouse()), {"refund": {"semantics": "IRREVERSIBLE"}})
    wrapped = _plugin().functions["charge"]
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(wrapped, semantics="IRREVERSIBLE")


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    plugins().register(adapter, "semantic_kernel")
    function = KernelPlugin.from_object(PLUGIN, Warehouse()).functions["charge"]
    wrapped = plugins().wrap_tool(function, StepOptions("IRREVERSIBLE"), "charge")
    assert type(wrapped) is type(function) and wrapped.metadata == function.metadata
    assert plugins().wrap_tool(object(), StepOptions("REVERSIBLE")) is None


#: What a refactor of semantic-kernel could do: the filter extension's call stack takes another argument.
MOVED_FILTERS = """
from semantic_kernel.filters.kernel_filters_extension import KernelFilterExtension
KernelFilterExtension.construct_call_stack = lambda self, filter_type, inner, extra=None: None
"""


def test_an_install_whose_semantic_kernel_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_semantic_kernel", MOVED_FILTERS, "semantic-kernel<1.46,>=1.26.1 (installed: semantic-kernel 1.45",
                                 "Kernel.construct_call_stack(filter_type, inner_function) has changed")
