"""A wrapped *sync* tool written ``await tool(...)`` runs its effect once, then returns its result.

The seed's AgentKit snippet wraps a plain function and awaits it. The result of a sync
function is not awaitable, so the ``await`` used to raise TypeError after the effect
had already run (outside a saga nothing undid it). Every front door that wraps a sync
callable (``AgentKit.safe_tool``, ``@tool``, ``SagaFleet.register``) must either make
the call awaitable or refuse before the effect: here each one is awaited and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agent_saga import (
    AgentKit,
    BoundaryRequired,
    Compensation,
    MemoryWAL,
    SagaAborted,
    SagaFleet,
    saga_scope,
    tool,
    toolspec,
)


class World:
    """A payment system with real state: charges made and refunds issued."""

    def __init__(self) -> None:
        self.charged: list[int] = []
        self.refunded: list[str] = []

    def charge(self, amount: int) -> dict[str, Any]:
        self.charged.append(amount)
        return {"id": f"ch_{len(self.charged)}", "amount": amount}

    def refund(self, charge_id: str) -> None:
        self.refunded.append(charge_id)


def undo(world: World) -> Callable[[dict[str, Any]], Compensation]:
    return lambda r: Compensation(fn=world.refund, kwargs={"charge_id": r["id"]})


def kit_door(world: World, wal: MemoryWAL) -> tuple[Callable[..., Any], Any]:
    kit = AgentKit("awaited", wal=wal)
    charge = kit.safe_tool(world.charge, semantics="COMPENSABLE", name="payments.charge", compensate=undo(world))
    return charge, kit.transaction()


def tool_door(world: World, wal: MemoryWAL) -> tuple[Callable[..., Any], Any]:
    charge = tool(world.charge, semantics="COMPENSABLE", name="payments.charge", compensate=undo(world))
    return charge, saga_scope(wal)


def fleet_door(world: World, wal: MemoryWAL) -> tuple[Callable[..., Any], Any]:
    fleet = SagaFleet("awaited")
    charge = fleet.register(world.charge, framework="plain", name="payments.charge", semantics="COMPENSABLE",
                            compensate=undo(world))
    return charge, fleet.transaction(wal=wal)


DOORS = {"safe_tool": kit_door, "@tool": tool_door, "fleet.register": fleet_door}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_awaiting_a_sync_tool_in_a_transaction_runs_the_step_once_and_returns_its_result(door: str) -> None:
    world, wal = World(), MemoryWAL()
    charge, boundary = DOORS[door](world, wal)

    async def main() -> Any:
        async with boundary:
            return await charge(amount=4200)

    assert asyncio.run(main()) == {"id": "ch_1", "amount": 4200}
    assert world.charged == [4200] and world.refunded == []
    types = [r["type"] for r in wal.records()]
    assert types.count("STEP_COMMITTED") == 1 and types[-1] == "SAGA_COMPLETED"


@pytest.mark.parametrize("door", sorted(DOORS))
def test_an_awaited_sync_tool_is_undone_once_when_a_later_step_fails(door: str) -> None:
    world, wal = World(), MemoryWAL()
    charge, boundary = DOORS[door](world, wal)

    async def main() -> None:
        async with boundary:
            await charge(amount=4200)
            raise RuntimeError("ship_order failed")

    with pytest.raises(SagaAborted) as aborted:
        asyncio.run(main())
    assert aborted.value.report.clean
    assert world.charged == [4200] and world.refunded == ["ch_1"]


@pytest.mark.parametrize("door", ["safe_tool", "@tool"])
def test_awaiting_a_sync_tool_outside_any_saga_calls_it_straight_through_once(door: str) -> None:
    world, wal = World(), MemoryWAL()
    charge, _ = DOORS[door](world, wal)

    async def main() -> Any:
        return await charge(amount=7)

    assert asyncio.run(main()) == {"id": "ch_1", "amount": 7}
    assert world.charged == [7] and list(wal.records()) == []


def test_an_awaited_fleet_tool_outside_a_boundary_refuses_before_the_effect() -> None:
    world, wal = World(), MemoryWAL()
    charge, _ = fleet_door(world, wal)

    async def main() -> None:
        await charge(amount=7)

    with pytest.raises(BoundaryRequired):
        asyncio.run(main())
    assert world.charged == []


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_sync_tool_called_without_await_still_returns_its_value(door: str) -> None:
    # The awaitable form is only for a call that is awaited: a plain call, from sync code
    # or from async code, gets the value itself, as it always did.
    world, wal = World(), MemoryWAL()
    charge, boundary = DOORS[door](world, wal)

    async def in_async() -> Any:
        async with boundary:
            return charge(amount=1)

    assert asyncio.run(in_async()) == {"id": "ch_1", "amount": 1}
    charge, boundary = DOORS[door](world, wal)
    with boundary:
        assert charge(amount=2) == {"id": "ch_2", "amount": 2}
    assert world.charged == [1, 2]


def test_an_async_tool_is_untouched() -> None:
    calls: list[int] = []

    async def charge(amount: int) -> int:
        calls.append(amount)
        return amount

    wrapped = tool(charge, semantics="REVERSIBLE")

    async def main() -> int:
        async with saga_scope(MemoryWAL()):
            return int(await wrapped(amount=3))

    assert asyncio.run(main()) == 3 and calls == [3]


@pytest.mark.parametrize("door", sorted(DOORS))
def test_on_an_unproven_interpreter_an_awaited_sync_tool_runs_once_never_twice_or_not_at_all(
    door: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bytecode look-up behind `await tool(...)` is proven on CPython 3.11-3.13 only; elsewhere
    # it must fail safe: the effect once and its step recorded, then the await's own TypeError.
    monkeypatch.setattr(toolspec, "_BYTECODE_KNOWN", False)
    world, wal = World(), MemoryWAL()
    charge, boundary = DOORS[door](world, wal)

    async def main() -> Any:
        async with boundary:
            return await charge(amount=4200)

    with pytest.raises((TypeError, SagaAborted)):
        asyncio.run(main())
    assert world.charged == [4200]  # once: never twice, never skipped
    assert [r["type"] for r in wal.records()].count("STEP_COMMITTED") == 1
