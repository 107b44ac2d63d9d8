"""The human queue: what the daemon will not decide on its own.

One JSON-lines file (``<log>.recovery/escalations.jsonl``) of ``opened`` and
``resolved`` events under ``flock``. An escalation's id is a pure function of
(saga, step, kind), so the daemon opening it again on the next sweep finds it
already there: each problem is queued once, however often the daemon looks.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "Escalation", "EscalationQueue", "escalation_id"]

#: Why a step can land in the queue.
KINDS = {
    "irreversible": "an IRREVERSIBLE step committed; nothing can undo it",
    "unknown-outcome": "the step's outcome is unknown and no inverse was recorded before the call",
    "not-recoverable": "the undo is a closure (or has unserializable arguments) that died with the process",
    "no-undo": "a committed step has no undo recorded",
    "handler-missing": "the undo names a handler this daemon has not imported",
    "compensation-failing": "the undo kept failing; the saga is dead-lettered",
    "unreadable": "the saga's records cannot be read (encrypted or redacted bodies)",
}


def escalation_id(saga: str, step: int | None, kind: str) -> str:
    material = f"{saga}\x1f{'' if step is None else step}\x1f{kind}".encode()
    return hashlib.sha256(material).hexdigest()[:16]


@dataclass(slots=True)
class Escalation:
    id: str
    saga: str
    step: int | None
    kind: str
    detail: str
    opened_at: float
    resolved: bool = False
    note: str = ""

    def line(self) -> str:
        where = f"step {self.step}" if self.step is not None else "saga"
        state = "resolved" if self.resolved else "OPEN"
        return f"{self.id}  {state:8}  saga {self.saga} {where}  [{self.kind}] {self.detail}"


class EscalationQueue:
    """A file-backed queue of escalations, shared by every daemon of one log."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _read(self, fd: int) -> dict[str, Escalation]:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        found: dict[str, Escalation] = {}
        for line in data.split(b"\n"):
            try:
                entry: Any = json.loads(line) if line.strip() else None
            except ValueError:
                continue  # a fragment from a writer that died mid-line
            if not isinstance(entry, dict):
                continue
            if entry.get("event") == "opened" and entry.get("id") not in found:
                step = entry.get("step")
                found[str(entry["id"])] = Escalation(
                    str(entry["id"]), str(entry.get("saga", "")),
                    step if isinstance(step, int) else None, str(entry.get("kind", "")),
                    str(entry.get("detail", "")), float(entry.get("ts", 0)),
                )
            elif entry.get("event") == "resolved" and entry.get("id") in found:
                found[str(entry["id"])].resolved = True
                found[str(entry["id"])].note = str(entry.get("note", ""))
        return found

    def _open(self, lock: int) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        fcntl.flock(fd, lock)
        return fd

    @staticmethod
    def _append(fd: int, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)

    def add(self, saga: str, step: int | None, kind: str, detail: str) -> tuple[Escalation, bool]:
        """Queue an escalation unless it is already queued: (the escalation, newly added)."""
        if kind not in KINDS:
            raise ValueError(f"unknown escalation kind {kind!r}; expected one of {sorted(KINDS)}")
        eid = escalation_id(saga, step, kind)
        fd = self._open(fcntl.LOCK_EX)
        try:
            existing = self._read(fd).get(eid)
            if existing is not None:
                return existing, False
            now = time.time()
            self._append(fd, {
                "event": "opened", "id": eid, "saga": saga, "step": step, "kind": kind,
                "detail": detail, "ts": now,
            })
            return Escalation(eid, saga, step, kind, detail, now), True
        finally:
            os.close(fd)

    def resolve(self, eid: str, note: str = "") -> Escalation:
        """Mark an escalation handled by a human; KeyError naming the known ids otherwise."""
        fd = self._open(fcntl.LOCK_EX)
        try:
            known = self._read(fd)
            found = known.get(eid)
            if found is None:
                ids = ", ".join(sorted(known)) or "none"
                raise KeyError(f"no escalation {eid!r} in {self.path} (known: {ids})")
            if not found.resolved:
                self._append(fd, {"event": "resolved", "id": eid, "note": note, "ts": time.time()})
                found.resolved, found.note = True, note
            return found
        finally:
            os.close(fd)

    def all(self) -> list[Escalation]:
        if not self.path.exists():
            return []
        fd = self._open(fcntl.LOCK_SH)
        try:
            return sorted(self._read(fd).values(), key=lambda e: e.opened_at)
        finally:
            os.close(fd)

    def pending(self) -> list[Escalation]:
        return [e for e in self.all() if not e.resolved]
