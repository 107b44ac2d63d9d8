"""A small file-backed world of real effects for the recovery and crash tests.

Every call records its *attempt* and, separately, whether it was *applied*; like
Stripe, an effect dedupes by its idempotency key, so a second call with the same
key is recorded as an attempt and "deduped", never applied twice. Tests assert on
this file, not on the log: it is what the outside world would see.

The world lives in $RECOVERY_WORLD (a directory). $RECOVERY_ROLE says who calls
(worker / daemon). $RECOVERY_CRASH_EFFECT="op:ref:after|before" kills the process
with os._exit inside that effect call, after (or before) the effect is applied.
$RECOVERY_EFFECT_DELAY (seconds) makes every call slow, so racing callers overlap.
$RECOVERY_PAUSE_EFFECT="op:ref" makes that call, once its effect is applied, create
"paused-op-ref" in the world and sleep, so a test can SIGKILL the process right there.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from agent_saga import compensator

__all__ = ["applied", "charge", "entries", "notify", "refund", "release", "reserve"]


def _file() -> Path:
    return Path(os.environ["RECOVERY_WORLD"]) / "world.jsonl"


def _emit(fd: int, entry: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())


def entries(directory: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    path = Path(directory) / "world.jsonl" if directory is not None else _file()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def applied(items: list[dict[str, Any]], op: str) -> list[dict[str, Any]]:
    return [e for e in items if e["ev"] == "applied" and e["op"] == op]


def _crash_point(op: str, ref: str, when: str) -> bool:
    return os.environ.get("RECOVERY_CRASH_EFFECT") == f"{op}:{ref}:{when}"


def _effect(op: str, ref: str, key: str | None, **extra: Any) -> dict[str, Any]:
    if not key:
        raise ValueError(f"{op}({ref!r}) needs an idempotency_key; the engine must pass one")
    path = _file()
    path.parent.mkdir(parents=True, exist_ok=True)
    role = os.environ.get("RECOVERY_ROLE", "worker")
    time.sleep(float(os.environ.get("RECOVERY_EFFECT_DELAY", "0")))
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        base = {"op": op, "ref": ref, "key": key, "role": role, "pid": os.getpid(), **extra}
        _emit(fd, {"ev": "attempt", **base})
        if _crash_point(op, ref, "before"):
            os._exit(137)
        size = os.fstat(fd).st_size
        seen = [json.loads(line) for line in os.pread(fd, size, 0).splitlines() if line.strip()]
        if any(e["ev"] == "applied" and e["key"] == key for e in seen):
            _emit(fd, {"ev": "deduped", **base})
        else:
            _emit(fd, {"ev": "applied", **base})
        if _crash_point(op, ref, "after"):
            os._exit(137)  # the effect landed; the caller never hears back
        if os.environ.get("RECOVERY_PAUSE_EFFECT") == f"{op}:{ref}":
            # The effect landed: say so to the test, which SIGKILLs us while we wait here.
            (path.parent / f"paused-{op}-{ref}").touch()
            time.sleep(3600)
    finally:
        os.close(fd)
    return {"id": f"{op}-{ref}", "ref": ref}


def charge(ref: str, amount: int, idempotency_key: str | None = None) -> dict[str, Any]:
    return _effect("charge", ref, idempotency_key, amount=amount)


@compensator("world.refund")
def refund(ref: str, idempotency_key: str | None = None) -> None:
    # Refunding a charge that never landed is a no-op success, as with a real processor's
    # "nothing to refund": the daemon may undo an in-flight step whose call never arrived.
    _effect("refund", ref, idempotency_key)


def reserve(item: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return _effect("reserve", item, idempotency_key)


@compensator("world.release")
def release(reservation: str, idempotency_key: str | None = None) -> None:
    _effect("release", reservation.removeprefix("reserve-"), idempotency_key)


def notify(to: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return _effect("notify", to, idempotency_key)
