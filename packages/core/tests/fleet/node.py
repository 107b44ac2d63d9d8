"""One "node" of the fleet tests: a worker that dies between steps, run in its own process.

usage: python node.py worker URL        charge A, reserve R1, charge B; die (os._exit) after step 3
       python node.py steps URL N TAG   N durable steps, one saga each, then exit normally

The effects go to recovery_world (``$RECOVERY_WORLD``), the outside world every node shares.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

import recovery_world as world

from agent_saga import ActionSemantics, call_with, delete_by, saga_scope
from agent_saga.log.resolve import open_log

C = ActionSemantics.COMPENSABLE


def worker(url: str) -> None:
    wal = open_log(url)
    with saga_scope(wal, name="node-a-order") as s:
        print(s.saga_id, flush=True)
        s.execute(tool="world.charge", semantics=C, forward=functools.partial(world.charge, ref="A", amount=100),
                  compensate=call_with(world.refund, ref="A"))
        s.execute(tool="world.reserve", semantics=C, forward=functools.partial(world.reserve, item="R1"),
                  compensate=delete_by(world.release, field="id"))
        s.execute(tool="world.charge", semantics=C, forward=functools.partial(world.charge, ref="B", amount=250),
                  compensate=call_with(world.refund, ref="B"))
        wal.barrier()  # step 3's commit is durable: the agent is now "thinking" about step 4
        os._exit(137)  # ... and the node dies: no finally, no atexit


def steps(url: str, count: int, tag: str) -> None:
    with open_log(url) as wal:
        for i in range(count):
            with saga_scope(wal, name=f"{tag}-{i}") as s:
                s.execute(tool="world.charge", semantics=C,
                          forward=functools.partial(world.charge, ref=f"{tag}-{i}", amount=i),
                          compensate=call_with(world.refund, ref=f"{tag}-{i}"))


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2])
    elif sys.argv[1] == "steps":
        steps(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(__doc__)
