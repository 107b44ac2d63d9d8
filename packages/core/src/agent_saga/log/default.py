"""Which log a saga writes to when it is not told.

The default is ``$AGENT_SAGA_WAL``, else a FileWAL at ``./agent-saga.wal``, so crash
recovery works out of the box; ``$AGENT_SAGA_WAL`` is read as every CLI verb reads it
(``log.resolve``): a path is a file, a ``postgresql://`` or ``redis://`` URL its
server log. A memory-only log is never chosen silently: pass ``MemoryWAL()`` by name
if that is what you want.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agent_saga.log.base import WAL
from agent_saga.log.resolve import backend_of, default_target, open_log

__all__ = ["default_wal", "log_argument", "set_default_wal", "shared_log"]

_lock = threading.Lock()
_explicit: WAL | None = None
# One open log per target (a file's absolute path, or a URL as given), reused until it
# closes or breaks, so every saga of the process shares its group commit.
_by_target: dict[str, WAL] = {}


def set_default_wal(wal: WAL | str | os.PathLike[str] | None) -> WAL | None:
    """Use ``wal`` (a log, a file path or a log URL) wherever no log is given; None restores the default."""
    global _explicit
    with _lock:
        _explicit = _open(wal) if isinstance(wal, (str, os.PathLike)) else wal
        return _explicit


def default_wal() -> WAL:
    """The log ``saga_scope()`` uses when called without ``wal=``."""
    with _lock:
        if _explicit is not None:
            return _explicit
        return _open(default_target())


def shared_log(target: str | os.PathLike[str]) -> WAL:
    """The process's one open log at ``target`` (a file path or a log URL), opened on first use.

    What ``wal="trip.wal"`` means on every door: the sagas naming one target share one writer
    and its group commit, as sagas on the default log do, and none of them closes it.
    """
    with _lock:
        return _open(target)


def log_argument(wal: object) -> WAL | None:
    """What a door's ``wal=`` names: None, a log as given, or :func:`shared_log` of a path or URL.

    Every door takes what ``--wal-path`` takes; anything else is a ConfigurationError in one line.
    """
    if wal is None or isinstance(wal, WAL):
        return wal
    if isinstance(wal, str | os.PathLike) and os.fspath(wal):
        return shared_log(wal)
    from agent_saga.errors import ConfigurationError

    raise ConfigurationError(f"wal= must be a log (FileWAL, MemoryWAL, ...), a file path or a log URL, got {wal!r}")


def _open(target: str | os.PathLike[str]) -> WAL:
    # A file is keyed by its absolute path, fixed now: a later chdir does not move the log.
    key = os.fspath(target) if backend_of(target) != "file" else str(Path(target).absolute())
    wal = _by_target.get(key)
    if wal is None or getattr(wal, "broken", None) is not None or getattr(wal, "closed", False):
        wal = _by_target[key] = open_log(key)
    return wal
