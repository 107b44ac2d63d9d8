"""A worker process for the concurrent crash matrix: one concurrent shape per forked child, killed where told.

usage: python concurrent_worker.py POINTS.json

Each point names a shape (``agent_saga.proving._concurrent_shapes``), a directory (its log and
world) and an environment: $RECOVERY_CRASH_AT ("before:N" / "after:N": around the flush of the
N-th record, as recovery_worker.CrashingWAL) or $RECOVERY_CRASH_EFFECT ("op:ref:before|after",
inside an effect call, as recovery_world). The shape runs through ``run_concurrent`` with its
ordering forced, on a log whose every append waits until its record is durable, so a kill at a
record boundary leaves exactly the records and effects before it. A point with ``trace`` set
runs without a crash and writes what happened, in order: every record (type, step, and what
recovery reads from it), every effect applied, every write of the escalation queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import recovery_worker
import recovery_world as world
from recovery_checks import env_for

from agent_saga.proving._concurrent_run import ScheduledWAL, run_concurrent
from agent_saga.proving._concurrent_shapes import ConcurrentShape, Face, Fate, Sibling, Slot
from agent_saga.proving._scheduler import Scheduler, park
from agent_saga.recovery.escalations import EscalationQueue
from agent_saga.registry import compensator
from agent_saga.semantics import Compensation

__all__ = ["REFUND", "decode", "encode", "ref", "refund", "run_points"]


def ref(step: int) -> str:
    """The world's name for step ``step``'s charge."""
    return f"s{step}"


def encode(shape: ConcurrentShape) -> dict[str, Any]:
    return {"before": shape.before, "siblings": [[s.fate.name, s.slot.name] for s in shape.siblings],
            "order": list(shape.order), "halt": shape.halt, "face": shape.face.value}


def decode(data: dict[str, Any]) -> ConcurrentShape:
    siblings = tuple(Sibling(Fate[fate], Slot[slot]) for fate, slot in data["siblings"])
    return ConcurrentShape(data["before"], siblings, tuple(data["order"]), data["halt"],
                           Face(data["face"]))


class FileWorld:
    """Charges and refunds in recovery_world's file (which a daemon in another process reads too)."""

    def __init__(self, trace: list[list[Any]]) -> None:
        self.trace = trace

    def forward(self, step: int, idempotency_key: str | None = None) -> dict[str, Any]:
        result = world.charge(ref(step), step, idempotency_key=idempotency_key)
        self.trace.append(["effect", "charge", ref(step)])
        return {"step": step, **result}

    def undo(self, step: int, works: bool) -> Compensation:
        if not works:
            raise ValueError("the file world's refunds always work: keep refusing undos out of its shapes")
        return Compensation(fn=refund, handler=REFUND, kwargs={"ref": ref(step)})


#: The undo of every charge: recovery_world's refund, a point the scheduler can hold the rollback at.
REFUND = "concurrent.refund"
_traces: list[list[list[Any]]] = []  # the trace of this process's run (a child runs one)


@compensator(REFUND)
def refund(ref: str, idempotency_key: str | None = None) -> None:
    park("undo")
    world.refund(ref, idempotency_key=idempotency_key)
    for trace in _traces:
        trace.append(["effect", "refund", ref])


class CrashingScheduledWAL(ScheduledWAL, recovery_worker.CrashingWAL):
    """Scheduled, every append durable before it returns, killed at the record $RECOVERY_CRASH_AT names."""

    def __init__(self, path: Path, scheduler: Scheduler, trace: list[list[Any]]) -> None:
        super().__init__(path, scheduler, synchronous=True)
        self.trace = trace

    def append(self, type: str, saga: str, body: Any, step: int | None = None) -> int:
        comp = body.get("compensation")
        self.trace.append(["record", str(type), step, body.get("semantics"), isinstance(comp, dict),
                           body.get("in_flight", False), body.get("kind")])
        return super().append(type, saga, body, step)


def _trace_queue(trace: list[list[Any]]) -> None:
    """Trace the escalation queue's writes too: a crash between one and its ESCALATED record is a state of its own."""
    add, resolve = EscalationQueue.add, EscalationQueue.resolve

    def traced_add(queue: EscalationQueue, saga: str, step: int | None, kind: str, detail: str) -> Any:
        escalation, created = add(queue, saga, step, kind, detail)
        if created:
            trace.append(["queued", step, kind])
        return escalation, created

    def traced_resolve(queue: EscalationQueue, eid: str, note: str = "") -> Any:
        escalation = resolve(queue, eid, note)
        trace.append(["answered", escalation.step, escalation.kind])
        return escalation

    EscalationQueue.add = traced_add  # type: ignore[method-assign]  # this child process only
    EscalationQueue.resolve = traced_resolve  # type: ignore[method-assign]


def _keep_thread_errors(directory: Path) -> None:
    """Keep what kills any thread of this child (a log's flusher, say) beside the point's log.

    The matrix discards the worker's stderr, where the default hook prints it.
    """

    def keep(args: threading.ExceptHookArgs) -> None:
        text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        name = args.thread.name if args.thread is not None else "?"
        with Path(directory, "thread-errors.txt").open("a") as out:
            out.write(f"thread {name} died:\n{text}")
        previous(args)

    previous = threading.excepthook
    threading.excepthook = keep


def run_point(point: dict[str, Any]) -> None:
    _keep_thread_errors(Path(point["dir"]))
    os.environ.update(point["env"])
    recovery_worker.crash_at = os.environ.get("RECOVERY_CRASH_AT", "")
    trace: list[list[Any]] = []
    _traces.append(trace)
    _trace_queue(trace)
    directory = Path(point["dir"])
    run_concurrent(decode(point["shape"]), world=FileWorld(trace), directory=directory,
                   wal_factory=lambda path, scheduler: CrashingScheduledWAL(path, scheduler, trace))
    if point.get("trace"):
        Path(point["trace"]).write_text(json.dumps(trace))


def run_points(tmp: Path, points: list[dict[str, Any]], name: str = "points.json") -> list[int]:
    """Run ``points`` in a worker process (each in a forked child of it): their exit codes."""
    (tmp / name).write_text(json.dumps(points))
    done = subprocess.run([sys.executable, __file__, str(tmp / name)], env=env_for(tmp),
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    codes: list[int] = json.loads(done.stdout.splitlines()[-1])
    return codes


def main() -> None:
    points = json.loads(Path(sys.argv[1]).read_text())
    codes = []
    recovery_worker.ready_to_fork()
    for point in points:
        pid = os.fork()
        if pid == 0:
            try:
                run_point(point)
            except BaseException:
                traceback.print_exc()
                # Kept beside the point's log, so the matrix can say why a crash point never fired.
                Path(point["dir"], "worker-error.txt").write_text(traceback.format_exc())
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(codes))


if __name__ == "__main__":
    main()
