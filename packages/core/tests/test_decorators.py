from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from agent_saga import (
    BoundaryRequired,
    Compensation,
    CompensationError,
    ConfigurationError,
    MemoryWAL,
    SagaAborted,
    guard,
    saga_scope,
    tool,
)


def test_tool_requires_semantics() -> None:
    with pytest.raises(ConfigurationError, match="needs semantics="):

        @tool
        def charge(amount: int) -> None: ...


def test_tool_refuses_irreversible_with_compensate() -> None:
    with pytest.raises(CompensationError, match="IRREVERSIBLE"):
        tool(semantics="IRREVERSIBLE", compensate=lambda r: None)(print)


def test_tool_refuses_a_compensate_that_is_neither_a_factory_nor_a_compensation() -> None:
    with pytest.raises(CompensationError, match="factory"):
        tool(semantics="COMPENSABLE", compensate=42)(print)  # type: ignore[arg-type]
    # A Compensation given directly is an undo known before the call: accepted.
    tool(semantics="COMPENSABLE", compensate=Compensation(fn=print))(print)


def test_tool_keeps_name_signature_and_sync_nature() -> None:
    @tool(semantics="REVERSIBLE")
    def lookup(city: str, *, units: str = "metric") -> str:
        """Weather for a city."""
        return f"{city}:{units}"

    @tool(semantics="REVERSIBLE", name="weather.async")
    async def alookup(city: str) -> str:
        return city

    assert lookup.__name__ == "lookup" and lookup.__doc__ == "Weather for a city."
    assert list(inspect.signature(lookup).parameters) == ["city", "units"]
    assert not inspect.iscoroutinefunction(lookup) and inspect.iscoroutinefunction(alookup)
    assert lookup.__saga_spec__.name == "lookup"  # type: ignore[attr-defined]
    assert alookup.__saga_spec__.name == "weather.async"  # type: ignore[attr-defined]


def test_tool_outside_a_saga_calls_straight_through() -> None:
    calls: list[int] = []

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=print))
    def charge(amount: int) -> int:
        calls.append(amount)
        return amount

    assert charge(5) == 5 and calls == [5]


def test_require_boundary_refuses_outside_a_saga() -> None:
    @tool(semantics="REVERSIBLE", require_boundary=True)
    def send(text: str) -> None: ...

    with pytest.raises(BoundaryRequired, match="outside any saga boundary"):
        send("hi")


async def test_tool_inside_a_saga_logs_named_args() -> None:
    wal = MemoryWAL()

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=print))
    async def charge(amount: int, currency: str = "usd", idempotency_key: str | None = None) -> str:
        return f"{amount}{currency}:{idempotency_key is not None}"

    async with saga_scope(wal) as s:
        out = await charge(4200, currency="eur")
    assert out == "4200eur:True"
    intent = next(r for r in wal.records() if r["type"] == "STEP_INTENT")
    assert intent["body"]["args"] == {"amount": 4200, "currency": "eur"}
    assert intent["body"]["tool"] == "charge"
    assert s.steps[0].tool == "charge"


def test_tool_args_fall_back_to_positions_when_the_signature_does_not_bind() -> None:
    @tool(semantics="REVERSIBLE")
    def f(a: int) -> int:
        return a

    spec: Any = f.__saga_spec__  # type: ignore[attr-defined]
    assert spec.loggable_args((1, 2), {"x": 3}) == {"arg0": 1, "arg1": 2, "x": 3}


async def test_tool_fallback_action_gets_the_same_arguments() -> None:
    def backup(order: str) -> str:
        return f"backup:{order}"

    @tool(semantics="REVERSIBLE", fallback_action=backup)
    def ship(order: str) -> str:
        raise ConnectionError("primary down")

    async with saga_scope(MemoryWAL()):
        assert await asyncio.to_thread(ship, "o1") == "backup:o1"


async def test_guard_joins_an_outer_saga() -> None:
    wal = MemoryWAL()

    @tool(semantics="REVERSIBLE")
    def step() -> None: ...

    @guard
    def inner() -> None:
        step()

    @guard
    async def ainner() -> None:
        step()

    async with saga_scope(wal):
        inner()
        await ainner()
    assert sum(r["type"] == "SAGA_STARTED" for r in wal.records()) == 1


def test_guard_with_options_opens_a_tagged_saga() -> None:
    wal = MemoryWAL()

    @guard(wal=wal, tags=["eu"])
    def job() -> int:
        return 1

    assert job() == 1
    start = next(r for r in wal.records() if r["type"] == "SAGA_STARTED")
    assert start["body"]["tags"] == ["eu"] and start["body"]["name"].endswith("job")


def test_guard_raises_saga_aborted() -> None:
    @guard(wal=MemoryWAL())
    def job() -> None:
        raise ValueError("x")

    with pytest.raises(SagaAborted) as info:
        job()
    assert info.value.report.clean and info.value.report.steps == ()
