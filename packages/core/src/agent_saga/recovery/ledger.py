"""The recovery ledger: which compensations a daemon attempted, and which finished.

Attempts and successes are separate entries. An attempt is written (and
fsynced) *before* the handler is called and a success right after it returns,
so a later daemon knows both "this is done, skip it" (even if the log record
saying so was lost) and "this was tried N times" (bounded retries, then dead
letter), including attempts whose daemon died mid-call.

The file form is JSON lines under an exclusive ``flock`` per write (see
``recovery.jsonl``). Reads are incremental and consume complete lines only; a
damaged line stops the daemon rather than being skipped. Every entry is keyed by
the compensation's deterministic idempotency key.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent_saga.recovery.jsonl import append_entry, entries, open_locked

__all__ = ["FileLedger", "KeyState", "Ledger"]


@dataclass(slots=True)
class KeyState:
    """What the ledger knows about one compensation key."""

    attempts: int = 0
    failures: int = 0
    done: bool = False
    last_error: str = ""
    last_failed_at: float = 0.0  # seconds since the epoch


class Ledger(Protocol):
    """What the daemon needs from a ledger (file-backed here; a server-backed one fits too)."""

    def refresh(self) -> None: ...

    def state(self, key: str) -> KeyState: ...

    def attempt(self, key: str, saga: str, step: int, by: str) -> None: ...

    def done(self, key: str, saga: str, step: int, by: str) -> None: ...

    def failed(self, key: str, saga: str, step: int, by: str, error: str) -> None: ...


class FileLedger:
    """A ledger in one JSON-lines file, safe for several processes.

    Nothing is created until the first entry is written, so a dry run leaves no trace.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._states: dict[str, KeyState] = {}
        self._offset = 0
        self._lines = 0

    def refresh(self) -> None:
        """Fold entries appended since the last call (by any process).

        Raises JournalCorrupt if a complete line is not an entry: a ledger that
        skipped one could let a compensation run twice.
        """
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        complete = data[: end + 1]
        for entry in entries(self.path, complete, self._lines + 1):
            self._apply(entry)
        self._lines += complete.count(b"\n")
        self._offset += end + 1

    def _apply(self, entry: dict[str, Any]) -> None:
        key = entry.get("key")
        if not isinstance(key, str):
            return
        state = self._states.setdefault(key, KeyState())
        event = entry.get("event")
        if event == "attempt":
            state.attempts += 1
        elif event == "done":
            state.done = True
        elif event == "failed":
            state.failures += 1
            state.last_error = str(entry.get("error", ""))
            ts = entry.get("ts")
            state.last_failed_at = ts / 1e6 if isinstance(ts, int) else 0.0

    def state(self, key: str) -> KeyState:
        return self._states.get(key) or KeyState()

    def keys(self) -> dict[str, KeyState]:
        return dict(self._states)

    def attempt(self, key: str, saga: str, step: int, by: str) -> None:
        self._write({"event": "attempt", "key": key, "saga": saga, "step": step, "by": by})

    def done(self, key: str, saga: str, step: int, by: str) -> None:
        self._write({"event": "done", "key": key, "saga": saga, "step": step, "by": by})

    def failed(self, key: str, saga: str, step: int, by: str, error: str) -> None:
        self._write({"event": "failed", "key": key, "saga": saga, "step": step, "by": by, "error": error})

    def _write(self, entry: dict[str, Any]) -> None:
        entry["ts"] = time.time_ns() // 1000
        fd = open_locked(self.path, fcntl.LOCK_EX)
        try:
            append_entry(fd, entry)
        finally:
            os.close(fd)
        # Our own entry is visible to us at once; refresh() picks up everyone else's.
        self.refresh()
