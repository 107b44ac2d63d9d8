"""A worker that charges inside a saga on the service's log and then hangs, to be SIGKILLed."""

from __future__ import annotations

import sys
import time

from service_world import charge, refund_of

from agent_saga import FileWAL, saga_scope

if __name__ == "__main__":
    wal_path, order = sys.argv[1], sys.argv[2]
    with saga_scope(FileWAL(wal_path), name="worker") as s:
        s.execute(tool="payments.charge", semantics="COMPENSABLE", forward=lambda: charge(order),
                  compensate=refund_of, wait_for_commit=True)
        print(s.saga_id, flush=True)
        time.sleep(3600)  # killed here: the saga never ends
