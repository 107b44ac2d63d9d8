"""bench_wal.py's harness, driving the public agent-saga 2.3.x from the package index.

Run by ``bench_wal.py --peer PYTHON`` in that interpreter (the two projects share the
import name, so they cannot share a process); prints the harness's figures as JSON.
Only this adapter knows the peer's API: ``saga_scope(wal=...)``, a started
``FileWAL``, ``execute(tool, semantics, forward, compensate=...)`` with an
``ActionSemantics`` member, and the log's ``flush_cycles`` counter. Its defaults are
kept (the default gate, ``durable_commit=True``), as a user would get them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import harness

from agent_saga import ActionSemantics, Compensation, FileWAL, compensator, saga_scope


@compensator("bench.refund")
def _refund(charge_id: str, idempotency_key: str | None = None) -> None:
    return None


def _undo(r: Any) -> Compensation:
    return Compensation(fn=_refund, handler="bench.refund", kwargs={"charge_id": r["id"]})


async def _charge() -> dict[str, str]:
    return {"id": "ch_1"}


class Peer:
    """The public agent-saga 2.3.x, through its public API."""

    inline_sync = False  # it always runs a sync tool on its tool pool

    def __init__(self) -> None:
        from agent_saga import _version

        self.name = f"agent-saga {_version.__version__} (index)"

    async def open_log(self, path: Path) -> Any:
        wal = FileWAL(path)
        await wal.start()
        return wal

    async def close_log(self, wal: Any) -> None:
        await wal.close()

    def flushes(self, wal: Any) -> int:
        return int(wal.flush_cycles)

    @asynccontextmanager
    async def scope(self, wal: Any) -> AsyncIterator[Any]:
        async with saga_scope(wal=wal) as saga:
            yield saga

    def durable_step(self, saga: Any) -> Awaitable[Any]:
        return saga.execute("stripe.charge", ActionSemantics.COMPENSABLE, _charge, compensate=_undo)  # type: ignore[no-any-return]

    def reversible_async(self, saga: Any, tool: Callable[[], Awaitable[int]]) -> Awaitable[Any]:
        return saga.execute("cart.add", ActionSemantics.REVERSIBLE, tool)  # type: ignore[no-any-return]

    def reversible_sync(self, saga: Any, tool: Callable[[], int], inline: bool) -> Awaitable[Any]:
        return saga.execute("cart.add", ActionSemantics.REVERSIBLE, tool)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(harness.run(Peer(), Path(args.dir), args.steps))))


if __name__ == "__main__":
    main()
