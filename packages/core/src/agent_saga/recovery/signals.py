"""Send a named event to a durable run: an EVENT_SIGNALLED record in the saga's log.

``signal(saga_id, name, data, wal=...)`` is the API; ``agent-saga signal SAGA NAME --data JSON``
the command. The run's ``wait_for_event(name)`` (engine/waits.py) takes it: the oldest signal of
that name no earlier wait took, whether it was sent before the wait began, during it, or while
the run's process was dead (a resume finds it in the log). A signal in this process wakes the
wait at once; one written by another process is seen at the wait's next look at the log.

A signal is a claim, not an authority: the record says which process wrote it (``by``, as that
process says), nothing more. It approves nothing privileged (see docs/SECURITY.md).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from agent_saga.durable_run import log_of
from agent_saga.engine.waits import nudge
from agent_saga.errors import SignalRefused
from agent_saga.log.base import WAL, MemoryWAL
from agent_saga.log.codec import canonical
from agent_saga.log.encodable import name_problem, plain_json, unencodable
from agent_saga.log.records import RecordType as R
from agent_saga.log.resolve import is_url
from agent_saga.log.results import DURABLE_RESULT_BYTES
from agent_saga.recovery.fold import SagaView, durable_blocker, fold
from agent_saga.recovery.stores import recovery_store, verified_tail

__all__ = ["signal", "signal_blocker"]


def _checked(saga_id: Any, name: Any, data: Any) -> None:
    """Refuse, in one line, arguments that are not a saga id, an event name and JSON data."""
    if not isinstance(saga_id, str) or not saga_id.strip():
        raise SignalRefused(f"signal: saga_id must be a saga's id, got {saga_id!r}")
    if not isinstance(name, str) or not name.strip():
        raise SignalRefused(f"signal: the event's name must be a non-empty str, got {name!r}")
    problem = name_problem(name, "the event's name")
    if problem is not None:
        raise SignalRefused(f"signal: {problem}")
    if not plain_json(data):
        why = unencodable(data, "data") or f"data is a {type(data).__name__}"
        raise SignalRefused(f"signal {name!r}: the data is not JSON ({why}); send str, numbers, bools, None, "
                            "lists and dicts with str keys")
    size = len(canonical(data).encode())
    if size > DURABLE_RESULT_BYTES:
        raise SignalRefused(f"signal {name!r}: the data is {size} bytes as JSON, more than the {DURABLE_RESULT_BYTES} "
                            "a run is served from its log; send a reference to it instead (a URL, an id)")


def signal_blocker(view: SagaView | None, saga_id: str, location: str) -> str | None:
    """Why no wait of ``view`` could ever take a signal (None: one can); one line."""
    return durable_blocker(view, saga_id, location, not_durable="nothing in it waits for an event",
                           ended="no wait of it will ever read a signal", unwinding=": no wait of it will read a signal")


def signal(saga_id: str, name: str, data: Any = None, *, wal: WAL | str | os.PathLike[str] | None = None) -> None:
    """Send the event ``name`` with JSON ``data`` to the durable run ``saga_id``, in its log ``wal``.

    ``wal``: the run's log (a WAL, a path or a URL; default the default log). The record is durable
    when this returns. Raises :class:`SignalRefused` (one line; nothing written) for an id that
    names no open durable run there, a name that is not text, data that is not JSON (or over 64 KiB),
    or a log that does not verify.
    """
    _checked(saga_id, name, data)
    if wal is not None and not isinstance(wal, WAL) and not is_url(wal) and not Path(wal).is_file():
        raise SignalRefused(f"no log at {os.fspath(wal)}: give the run's log (wal=, --wal-path)")
    log = log_of(wal)  # the default log when none is named, as the run itself used
    log.barrier()  # what this process queued to the log (a run's start) is on disk before it is read
    why = signal_blocker(_view(log, wal, saga_id), saga_id, log.location)
    if why is not None:
        raise SignalRefused(why)
    body = {"name": name, "data": data, "by": f"signal@{socket.gethostname()}:{os.getpid()}"}
    log.barrier(log.append(R.EVENT_SIGNALLED, saga_id, body))
    nudge(saga_id)


def _view(log: WAL, wal: WAL | str | os.PathLike[str] | None, saga_id: str) -> SagaView | None:
    """The saga as its log says, read chain-checked; a memory log (this process's own) as it is."""
    if isinstance(log, MemoryWAL):
        return fold(log.records()).get(saga_id)
    store = recovery_store(log if wal is None else wal)
    try:
        return verified_tail(store, None, "a signal", SignalRefused).sagas.get(saga_id)
    finally:
        store.close()
