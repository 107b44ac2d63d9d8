"""usage: python snapshot_worker.py WAL STORE_KIND STORE_WHERE — runs snapshot_world's scenario.

$SNAPSHOT_CRASH_AT names the point (snapshot_world.POINTS) where the process SIGKILLs itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import snapshot_world as world

from agent_saga.log.resolve import open_log

if __name__ == "__main__":
    wal_at, kind, where = sys.argv[1:4]
    wal = open_log(wal_at)
    try:
        if kind == "in-process":
            world.in_process_scenario(wal)
        else:
            world.scenario(wal, world.make_store(kind, where))
    finally:
        wal.close()
