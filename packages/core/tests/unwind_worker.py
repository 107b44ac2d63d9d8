"""A worker for the rollback crash tests: N charges, then the agent fails and the saga unwinds.

usage: python unwind_worker.py LOG N sync|async

LOG is a file path or a server URL (``open_log``). The undos are ``world.refund``
of U1..UN (newest first); the test sets $RECOVERY_PAUSE_EFFECT="refund:Uk" so that
one of them, once its effect has landed, tells the test and waits to be SIGKILLed.

$UNWIND_LINGER (seconds, default 60) is the log's ``linger``: how long a record
nobody waits for may stay in memory. The default log lingers 2 ms, so whether an
earlier undo's record reached the disk before a kill is a race there; a long
linger makes it certain that only a barrier puts a record on disk, which is what
the rollback's durability must not depend on.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import recovery_world as world

from agent_saga import ActionSemantics, SagaAborted, call_with, saga_scope
from agent_saga.log.base import WAL
from agent_saga.log.resolve import open_log

C = ActionSemantics.COMPENSABLE


def charges(count: int) -> list[tuple[str, int]]:
    return [(f"U{i}", 10 * i) for i in range(1, count + 1)]


def run_sync(wal: WAL, count: int) -> None:
    try:
        with saga_scope(wal, name="unwind") as s:
            for ref, amount in charges(count):
                s.execute(tool="world.charge", semantics=C,
                          forward=functools.partial(world.charge, ref=ref, amount=amount),
                          compensate=call_with(world.refund, ref=ref))
            raise RuntimeError("the agent gave up after the last charge")
    except SagaAborted:
        pass


async def run_async(wal: WAL, count: int) -> None:
    try:
        async with saga_scope(wal, name="unwind") as s:
            for ref, amount in charges(count):
                await s.execute(tool="world.charge", semantics=C,
                                forward=functools.partial(world.charge, ref=ref, amount=amount),
                                compensate=call_with(world.refund, ref=ref))
            raise RuntimeError("the agent gave up after the last charge")
    except SagaAborted:
        pass


def main() -> None:
    target, count, face = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    wal = open_log(target, linger=float(os.environ.get("UNWIND_LINGER", "60")))
    if face == "sync":
        run_sync(wal, count)
    else:
        asyncio.run(run_async(wal, count))
    wal.close()


if __name__ == "__main__":
    main()
