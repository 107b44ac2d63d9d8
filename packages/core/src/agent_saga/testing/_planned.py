"""The planned-calls scene each framework adapter's tests run through the framework's own loop.

One model response asks for two REVERSIBLE reads and a COMPENSABLE reservation
(:data:`CALLS`). With a Speculator attached, the adapter's run helper names those calls
before the framework runs them: both reads run ahead and are redeemed, the reservation
is never run ahead. The Speculator is told the reads and the reservation touch different
resources (:data:`TOUCHES`): a framework that runs a response's calls at once may commit the
reservation before a read's turn, and a write of the saga drops the guesses it may overlap. An adapter's test makes wrapped framework tools with :meth:`Desk.tools`,
scripts its model with :data:`CALLS`, runs the real loop once with :func:`run_ahead`, then
calls :func:`check_redeemed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agent_saga.context import saga_scope
from agent_saga.log.base import WAL
from agent_saga.runtime import Speculator
from agent_saga.semantics import Compensation

__all__ = [
    "CALLS", "COMPENSABLE_REFUSED", "TOUCHES", "Desk", "check_ran_once", "check_redeemed", "records", "run_ahead",
]

#: The tool calls of the one model response: (tool name, arguments).
CALLS: tuple[tuple[str, dict[str, int]], ...] = (
    ("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5}),
)
#: What each tool touches (``Speculator(touches=...)``): the report's pages are not the seats.
TOUCHES = {"read_page": {"report"}, "reserve": {"seats"}}
#: Why the Speculator did not run the reservation ahead.
COMPENSABLE_REFUSED = "only a REVERSIBLE step may be speculated; 'reserve' is COMPENSABLE"


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def functions(self, *, async_reserve: bool = False) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """``(read_page, reserve)`` as plain functions, the shape every framework makes a tool of."""

        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        async def reserve_async(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            return reserve(seat)

        if async_reserve:
            reserve_async.__name__ = reserve_async.__qualname__ = "reserve"
            return read_page, reserve_async
        return read_page, reserve

    def release(self, result: dict[str, int]) -> Compensation:
        """The reservation's undo."""
        return Compensation(fn=self.released.append, kwargs={"object": result["seat"]})

    def tools(
        self, wrap_tool: Callable[..., Any], make: Callable[[Callable[..., Any]], Any] = lambda fn: fn, *,
        async_reserve: bool = False,
    ) -> list[Any]:
        """The two functions as an adapter's wrapped tools: ``make`` turns each into a framework
        tool (the function itself, for frameworks whose ``wrap_tool`` takes one), ``wrap_tool`` is
        the adapter's; the read REVERSIBLE, the reservation COMPENSABLE with :meth:`release`."""
        read_page, reserve = self.functions(async_reserve=async_reserve)
        return [
            wrap_tool(make(read_page), semantics="REVERSIBLE"),
            wrap_tool(make(reserve), semantics="COMPENSABLE", compensate=self.release),
        ]


def run_ahead(
    steps: list[Callable[..., Any]],
    wal: WAL,
    mode: str,
    *,
    go: Callable[[], Awaitable[Any]] | None = None,
    go_sync: Callable[[], Any] | None = None,
) -> Speculator:
    """Run the framework once in a saga on ``wal`` with a Speculator over ``steps`` (and :data:`TOUCHES`).

    ``mode`` "async" awaits ``go()`` on a fresh event loop; "sync" calls ``go_sync()``.
    """
    if mode == "sync" and go_sync is not None:
        with saga_scope(wal=wal), Speculator(steps, intent="turn-1", touches=TOUCHES) as ahead:
            go_sync()
        return ahead
    if mode != "async" or go is None:
        raise ValueError(f"run_ahead: mode {mode!r} needs go= (async) or go_sync= (sync)")

    async def main() -> Speculator:
        async with saga_scope(wal=wal), Speculator(steps, intent="turn-1", touches=TOUCHES) as ahead:
            await go()
        return ahead

    return asyncio.run(main())


def records(wal: WAL, kind: str) -> list[dict[str, Any]]:
    """The records of one type in ``wal``."""
    return [r for r in wal.records() if r["type"] == kind]


def check_ran_once(wal: WAL, desk: Desk) -> None:
    """Without a Speculator: every call ran once, in turn, and nothing was redeemed."""
    assert (sorted(desk.reads), desk.reserved) == ([1, 2], [5])
    assert records(wal, "SPECULATION_REDEEMED") == []


def check_redeemed(wal: WAL, ahead: Speculator, desk: Desk) -> None:
    """Both reads ran ahead once and were redeemed; the reservation ran once, in turn, and stands."""
    # each body ran once per call: the reads on the speculator's threads, then redeemed
    assert (sorted(desk.reads), desk.reserved, desk.released) == ([1, 2], [5], [])
    redeemed = records(wal, "SPECULATION_REDEEMED")
    assert sorted(r["body"]["tool"] for r in redeemed) == ["read_page", "read_page"]
    committed = {r["step"]: r["body"] for r in records(wal, "STEP_COMMITTED")}
    assert sorted(committed[r["step"]]["args"]["page"] for r in redeemed) == [1, 2]
    steps = {r["step"]: r["body"]["tool"] for r in wal.records() if r["type"].startswith("STEP_") and "tool" in r["body"]}
    assert sorted(steps.values()) == ["read_page", "read_page", "reserve"]
    # the COMPENSABLE call in the same response was never run ahead
    assert (ahead.stats.started, ahead.stats.redeemed, ahead.stats.wasted) == (2, 2, 0)
    assert ahead.stats.reasons == {COMPENSABLE_REFUSED: 1}
