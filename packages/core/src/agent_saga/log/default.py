"""Which log a saga writes to when it is not told.

The default is a FileWAL at ``./agent-saga.wal`` (or ``$AGENT_SAGA_WAL``), so crash
recovery works out of the box. A memory-only log is never chosen silently: pass
``MemoryWAL()`` by name if that is what you want.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agent_saga.log.base import WAL
from agent_saga.log.file import FileWAL

__all__ = ["default_wal", "set_default_wal"]

_lock = threading.Lock()
_explicit: WAL | None = None
_by_path: dict[Path, FileWAL] = {}


def set_default_wal(wal: WAL | str | os.PathLike[str] | None) -> WAL | None:
    """Use ``wal`` (a log, or a file path) wherever no log is given; None restores the default."""
    global _explicit
    with _lock:
        _explicit = _open(Path(wal)) if isinstance(wal, (str, os.PathLike)) else wal
        return _explicit


def default_wal() -> WAL:
    """The log ``saga_scope()`` uses when called without ``wal=``."""
    with _lock:
        if _explicit is not None:
            return _explicit
        return _open(Path(os.environ.get("AGENT_SAGA_WAL") or "agent-saga.wal"))


def _open(path: Path) -> FileWAL:
    key = path.absolute()
    wal = _by_path.get(key)
    if wal is None or wal.broken is not None or wal.closed:
        wal = _by_path[key] = FileWAL(key)
    return wal
