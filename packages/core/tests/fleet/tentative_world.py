"""A settle handler for tentative resources, recording every state it is told in $RECOVERY_WORLD/states.

usage: python tentative_world.py URL RESOURCE   registers RESOURCE in a saga on URL, then dies (os._exit).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agent_saga import compensator


def _file() -> Path:
    return Path(os.environ["RECOVERY_WORLD"]) / "states"


@compensator("orders.settle")
def settle(resource_id: str, state: str, idempotency_key: str | None = None) -> None:
    with open(_file(), "a") as fh:
        fh.write(f"{resource_id} {state} {os.environ.get('RECOVERY_ROLE', 'worker')}\n")


def states() -> list[tuple[str, str, str]]:
    if not _file().exists():
        return []
    return [tuple(line.split()) for line in _file().read_text().splitlines()]  # type: ignore[misc]


if __name__ == "__main__":
    from agent_saga import saga_scope
    from agent_saga.isolation import TentativeResource
    from agent_saga.log.resolve import open_log

    orders = TentativeResource(settle, kind="order")
    wal = open_log(sys.argv[1])
    with saga_scope(wal, name="tentative") as s:
        orders.register(sys.argv[2])
        wal.barrier()
        os._exit(137)  # the process dies with the order PENDING
