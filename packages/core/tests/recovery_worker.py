"""A worker process for the crash tests: runs sagas against recovery_world, dies where told.

usage: python recovery_worker.py WAL SCENARIO [N]
       python recovery_worker.py --fork-each POINTS.json   (the crash matrix)

$RECOVERY_CRASH_AT picks where the process dies with os._exit (no atexit, no
finally): "before:N" / "after:N" around the flush of the N-th record this process
writes, "after:TYPE" once the first record of that type is flushed, or "idle:K"
while idle between step K and step K+1. The log class below
flushes one record at a time so that every append is a boundary of its own; the
production FileWAL is not changed for the test.
"""

from __future__ import annotations

import functools
import gc
import importlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import recovery_world as world

from agent_saga import ActionSemantics, FileWAL, SagaAborted, SagaClosed, call_with, delete_by, saga_scope
from agent_saga.recovery.lease import lease_path

crash_at = os.environ.get("RECOVERY_CRASH_AT", "")
C, IRR = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE


class CrashingWAL(FileWAL):
    written = 0

    def _write(self, batch: Any) -> None:
        for entry in batch:
            number = CrashingWAL.written + 1
            if crash_at == f"before:{number}":
                os._exit(137)
            super()._write([entry])
            CrashingWAL.written = number
            if crash_at in (f"after:{number}", f"after:{entry[1]}"):
                os._exit(137)


def idle(wal: FileWAL, after_step: int) -> None:
    if crash_at == f"idle:{after_step}":
        # The model is "thinking": the step's commit record reaches the disk meanwhile. Waited
        # for, not slept for: nothing else makes it durable before the kill (the next intent
        # or the saga's end would), and a loaded machine may not run the flusher in time.
        wal.barrier()
        os._exit(137)


def four(wal: FileWAL) -> None:
    """charge A, reserve R1, notify (IRREVERSIBLE), charge B, then the agent fails."""
    try:
        with saga_scope(wal, name="four") as s:
            s.execute(tool="world.charge", semantics=C,
                      forward=functools.partial(world.charge, ref="A", amount=100),
                      compensate=call_with(world.refund, ref="A"))
            idle(wal, 1)
            s.execute(tool="world.reserve", semantics=C,
                      forward=functools.partial(world.reserve, item="R1"),
                      compensate=delete_by(world.release, field="id"))
            idle(wal, 2)
            s.execute(tool="world.notify", semantics=IRR,
                      forward=functools.partial(world.notify, to="ops"))
            idle(wal, 3)
            s.execute(tool="world.charge", semantics=C,
                      forward=functools.partial(world.charge, ref="B", amount=250),
                      compensate=call_with(world.refund, ref="B"))
            raise RuntimeError("the agent gave up after step 4")
    except SagaAborted:
        pass


def three(wal: FileWAL) -> None:
    """Three charges; $RECOVERY_CRASH_EFFECT kills the process inside the third."""
    with saga_scope(wal, name="three") as s:
        if os.environ.get("RECOVERY_SETTLE"):
            # The lease file must exist when we die (an encrypted log's lease length is read
            # from it): wait for the keeper's first write, which a loaded machine may delay
            # past any fixed sleep, rather than sleep for one tick.
            deadline = time.monotonic() + 60
            while not lease_path(wal.path, s.saga_id).exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the lease keeper wrote no lease file within 60 s")
                time.sleep(0.01)
        for ref, amount in (("A", 100), ("B", 200), ("C", 300)):
            s.execute(tool="world.charge", semantics=C,
                      forward=functools.partial(world.charge, ref=ref, amount=amount),
                      compensate=call_with(world.refund, ref=ref))


def late(wal: FileWAL) -> None:
    """Charge L runs beside a call that fails; it lands after the rollback gave up on it (no grace).

    Its undo then runs in its own thread: $RECOVERY_CRASH_EFFECT="refund:L:before" kills the
    process right there, with the charge standing and the saga rolled back in the log.
    """
    began = threading.Event()

    def charge(idempotency_key: str) -> dict[str, object]:
        began.set()
        deadline = time.monotonic() + 60
        while saga.status.value != "ROLLED_BACK":  # the rollback's end, which it did not wait for
            if time.monotonic() > deadline:
                raise SystemExit("the rollback did not end within 60 s")
            time.sleep(0.005)
        return world.charge("L", 7, idempotency_key=idempotency_key)

    with ThreadPoolExecutor(1) as pool:
        try:
            with saga_scope(wal, name="late", rollback_grace=0) as s:
                saga = s.saga
                sibling = pool.submit(s.execute, tool="world.charge", semantics=C, forward=charge,
                                      compensate=delete_by(world.refund, field="ref"))
                began.wait(60)
                raise RuntimeError("the other call failed")
        except SagaAborted:
            pass
        try:
            sibling.result()
        except SagaClosed:
            pass


def many(wal: FileWAL, count: int) -> None:
    """``count`` sagas, one committed charge each, all left open when the process dies."""
    scopes = []
    for i in range(count):
        scope = saga_scope(wal, name=f"many-{i}")
        s = scope.__enter__()
        s.execute(tool="world.charge", semantics=C,
                  forward=functools.partial(world.charge, ref=f"M{i}", amount=i + 1),
                  compensate=call_with(world.refund, ref=f"M{i}"))
        scopes.append(scope)
    wal.barrier()
    os._exit(137)


def live(wal: FileWAL, seconds: float) -> None:
    """One step, then idle (lease renewing) for ``seconds``, then complete."""
    with saga_scope(wal, name="live") as s:
        s.execute(tool="world.charge", semantics=C,
                  forward=functools.partial(world.charge, ref="L", amount=1),
                  compensate=call_with(world.refund, ref="L"))
        wal.barrier()
        print(s.saga_id, flush=True)
        time.sleep(seconds)


def ready_to_fork() -> None:
    """Import once, before forking a child per point, what each child would otherwise import again.

    A saga imports the gate wing (the default gate it installs) and the server leases on first
    use: in a fresh child, most of its CPU (a concurrent crash point: 60 -> 19 ms). The heap
    imported so far is then left out of the children's garbage collections, which walked it.
    """
    importlib.import_module("agent_saga.gate")
    importlib.import_module("agent_saga.recovery.server_leases")
    gc.freeze()


def fork_each(spec_file: str) -> None:
    """Run scenario "four" once per crash point, each in a forked child (a real process
    killed with os._exit), so the interpreter and the library are imported once."""
    global crash_at
    points = json.loads(Path(spec_file).read_text())
    codes = []
    ready_to_fork()
    for point in points:
        pid = os.fork()
        if pid == 0:
            os.environ.update(point["env"])
            crash_at = os.environ.get("RECOVERY_CRASH_AT", "")
            wal = CrashingWAL(point["wal"], linger=0.0)
            four(wal)
            wal.close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(codes))


def main() -> None:
    if sys.argv[1] == "--fork-each":
        fork_each(sys.argv[2])
        return
    wal = CrashingWAL(sys.argv[1], linger=0.0)
    scenario = sys.argv[2]
    if scenario == "four":
        four(wal)
    elif scenario == "three":
        three(wal)
    elif scenario == "late":
        late(wal)
    elif scenario == "many":
        many(wal, int(sys.argv[3]))
    elif scenario == "live":
        live(wal, float(sys.argv[3]))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    wal.close()


if __name__ == "__main__":
    main()
