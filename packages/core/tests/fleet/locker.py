"""A process that claims a semantic lock inside a saga: python locker.py KIND URL RESOURCE WAIT HOLD [die].

HOLD is seconds, or "stdin": hold until a line arrives on standard input.

Prints "held <t>" when it has the lock and "released <t>" when its saga ended (t: time.time()),
or "refused <holder>". With WAIT > 0 it first prints "waiting <holder>" when its first try finds
the lock held (so a test can release it knowing this process is waiting). With "die" it
SIGKILLs itself while holding the lock.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from agent_saga import MemoryWAL, SagaAborted, saga_scope
from agent_saga.isolation import LockHeld, PostgresSemanticLocks, RedisSemanticLocks

kind, url, resource, wait, hold = sys.argv[1:6]
die = len(sys.argv) > 6
ttl = float(os.environ.get("LOCK_TTL", "1"))
locks = RedisSemanticLocks(url, ttl=ttl) if kind == "redis" else PostgresSemanticLocks(url, ttl=ttl)
real_try = locks._try
said = False


def told(resource: str, token: str) -> str | None:
    """The manager's own try; the first time it finds the lock held while this process waits, it says so."""
    global said
    holder = real_try(resource, token)
    if holder is not None and float(wait) > 0 and not said:
        said = True
        print("waiting", holder, flush=True)
    return holder


locks._try = told  # type: ignore[method-assign]
try:
    with saga_scope(MemoryWAL(), name="locker") as s:
        locks.acquire(resource, wait=float(wait))
        print("held", time.time(), flush=True)
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        if hold == "stdin":
            sys.stdin.readline()  # hold until the test says so
        else:
            time.sleep(float(hold))
        print("releasing", time.time(), flush=True)
    print("free" if locks.holder(resource) is None else f"STILL HELD by {locks.holder(resource)}", flush=True)
except SagaAborted as err:
    if not isinstance(err.__cause__, LockHeld):
        raise
    print("refused", err.__cause__, flush=True)
finally:
    locks.close()
