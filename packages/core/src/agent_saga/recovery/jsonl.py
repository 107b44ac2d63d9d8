"""The ledger's and the escalation queue's file form: JSON lines, one writer at a time.

Each entry is one JSON object on one line, appended and fsynced under an
exclusive ``flock``. The files follow the log's final-line rule
(``agent_saga.log.lines``): a last line that parses counts (a writer adds its
newline), a last fragment that does not is a writer killed mid-line, never
synced, and the next writer cuts it off. A *complete* line that is not a JSON
object is damage and is reported, never skipped: a ledger that silently drops
an entry could repeat a refund, a queue that drops one could hide an escalation.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_saga.errors import WALError
from agent_saga.log.fs import FILE_MODE, private_dir
from agent_saga.log.lines import is_torn

__all__ = ["JournalCorrupt", "append_entry", "entries", "open_locked"]


class JournalCorrupt(WALError):
    """A ledger or escalation file holds a line that is not an entry."""


def open_locked(path: Path, lock: int, *, create: bool = True) -> int:
    """A descriptor of ``path`` (created 0600 in a 0700 directory if need be) holding ``lock``."""
    if create:
        private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), FILE_MODE)
    fcntl.flock(fd, lock)
    return fd


def entries(path: Path, data: bytes, first_line: int = 1) -> Iterator[dict[str, Any]]:
    """The entries in ``data`` (complete lines, plus a last line that parses); JournalCorrupt otherwise."""
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            continue
        last = number - first_line == len(lines) - 1
        if last and is_torn(raw):
            return  # a writer killed mid-line; it never reached its fsync
        try:
            entry = json.loads(raw)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise JournalCorrupt(
                f"{path}: line {number} is not an entry (not a JSON object); the file was damaged or "
                "edited. Move it aside and investigate; nothing was read past it"
            )
        yield entry


def append_entry(fd: int, entry: dict[str, Any]) -> None:
    """Append one entry to a file locked with ``open_locked(..., LOCK_EX)`` and sync it."""
    line = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    size = os.fstat(fd).st_size
    if size:
        tail = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
        if not tail.endswith(b"\n"):
            fragment = tail[tail.rfind(b"\n") + 1 :]
            if is_torn(fragment):
                os.ftruncate(fd, size - len(fragment))  # never synced by its writer: drop it
            else:
                line = b"\n" + line  # a complete last entry that lost its newline
    view = memoryview(line)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)
