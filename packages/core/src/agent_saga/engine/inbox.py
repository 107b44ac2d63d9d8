"""The signals sent to one saga, as a durable wait reads them from the log (engine/waits.py).

A wait looks at the log when it begins, when it is nudged, and every ``poll`` seconds. A
file log is followed: each look reads only the bytes appended since the last one (a
``ReadMark`` notices a rewrite, and the next look starts over), and decodes only the lines
that name the saga. Any other log is read whole at each look.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_saga.errors import WALCorrupt
from agent_saga.log.base import WAL
from agent_saga.log.codec import decode_line
from agent_saga.log.crypto import open_record
from agent_saga.log.file import FileWAL
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import Line, ReadMark, iter_lines, parses
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R

__all__ = ["Inbox"]


class Inbox:
    """The EVENT_SIGNALLED records of a saga and which of them a wait took (WAIT_ENDED ``signal``)."""

    def __init__(self, wal: WAL, saga_id: str) -> None:
        self.wal = wal
        self.saga_id = saga_id
        self._sent: dict[str, dict[int, Any]] = {}  # name -> seq -> data, in log order
        self._taken: set[Any] = set()
        self._mark: ReadMark | None = None
        plain = saga_id.isascii() and saga_id.isprintable() and not any(c in saga_id for c in '"\\')
        # Only a line holding the id's bytes can be the saga's record (an id JSON escapes is not pre-filtered).
        self._needle = saga_id.encode() if plain else b""

    def first(self, name: str) -> tuple[int, Any] | None:
        """The oldest signal of ``name`` no wait took yet (its seq and data), after reading what is new."""
        records = self._follow() if isinstance(self.wal, FileWAL) else self._whole()
        for record in records:
            self._note(record)
        return next(((seq, data) for seq, data in self._sent.get(name, {}).items() if seq not in self._taken), None)

    def _note(self, record: Record) -> None:
        body = record.get("body")
        if record.get("saga") != self.saga_id or not isinstance(body, dict):
            return
        if record.get("type") == R.WAIT_ENDED and body.get("outcome") == "signalled":
            self._taken.add(body.get("signal"))
        elif record.get("type") == R.EVENT_SIGNALLED and isinstance(record.get("seq"), int):
            self._sent.setdefault(str(body.get("name")), {})[record["seq"]] = body.get("data")

    def _whole(self) -> Iterable[Record]:
        self._sent, self._taken = {}, set()
        return self.wal.records()

    def _follow(self) -> list[Record]:
        """The saga's records appended since the last look (all of them after a rewrite)."""
        assert isinstance(self.wal, FileWAL)
        found: list[Record] = []
        with open_regular(self.wal.path) as fh:
            if self._mark is None or not self._mark.holds(fh):
                self._sent, self._taken, self._mark = {}, set(), None
            start = end = self._mark.offset if self._mark is not None else 0
            for line in iter_lines(fh, start):
                if not line.terminated and not parses(line.raw):
                    break  # a record being written (or torn): looked at again next time
                if self._needle in line.raw and line.raw.strip():
                    found.append(self._decode(self.wal, line))
                if line.terminated:  # a complete last line without its newline is read again next time
                    end = line.end
            self._mark = ReadMark.take(fh, end)
        return found

    @staticmethod
    def _decode(wal: FileWAL, line: Line) -> Record:
        try:
            record = decode_line(line.raw)
        except ValueError as err:
            raise WALCorrupt(f"{wal.path}: line at byte {line.offset} is not a record: {err}") from err
        return open_record(record, wal.encryptor, wal.path) if "enc" in record else record
