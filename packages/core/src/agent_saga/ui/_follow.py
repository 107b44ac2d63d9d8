"""Where the debugger reads a log from: one small interface, so any backend plugs in.

``RecordSource.poll()`` returns the records appended since the last call (and
whether the reader had to start over). ``FileSource`` tails a FileWAL file by byte
offset; ``WALSource`` reads any :class:`~agent_saga.log.WAL` through its own
``records()``, which is how a log on a URL backend (Postgres, Redis) will be shown:
it implements ``WAL`` and the debugger needs nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent_saga.errors import WALCorrupt
from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher, decode_line
from agent_saga.log.lines import ReadMark
from agent_saga.log.records import Record

__all__ = ["FileSource", "Poll", "RecordSource", "WALSource"]

_CHUNK = 1 << 22


@dataclass(frozen=True, slots=True)
class Poll:
    """What a poll found: new records, oldest first; ``reset``: forget what came before."""

    records: list[Record] = field(default_factory=list)
    reset: bool = False


class RecordSource(Protocol):
    """A log the debugger can show."""

    @property
    def location(self) -> str:
        """A human-readable name of the log (a path, a URL without credentials)."""
        ...

    def poll(self) -> Poll:
        """The complete records appended since the last poll. Raises OSError or WALCorrupt."""
        ...


class FileSource:
    """Tails one log file: only complete lines, from where the last poll stopped.

    A final line without its newline is still being written (or was torn by a crash)
    and is left for a later poll. A file that was replaced (compaction renames a new
    one in) or cut is read again from the start, with ``reset`` set.
    """

    def __init__(self, path: str | os.PathLike[str], *, encryptor: BodyCipher | None = None) -> None:
        self.path = Path(path)
        self.encryptor = encryptor
        self._offset = 0
        self._mark: ReadMark | None = None

    @property
    def location(self) -> str:
        return str(self.path)

    def poll(self) -> Poll:
        reset = False
        records: list[Record] = []
        with open(self.path, "rb") as fh:
            if self._mark is None or not self._mark.holds(fh):
                reset = self._mark is not None
                self._offset = 0
            fh.seek(self._offset)
            carry = b""
            while chunk := fh.read(_CHUNK):
                data = carry + chunk
                end = data.rfind(b"\n") + 1
                for line in data[:end].split(b"\n")[:-1]:
                    if line.strip():
                        records.append(self._decode(line))
                    self._offset += len(line) + 1
                carry = data[end:]
            self._mark = ReadMark.take(fh, self._offset)
        return Poll(records, reset)

    def _decode(self, line: bytes) -> Record:
        try:
            record = decode_line(line)
        except ValueError as err:
            raise WALCorrupt(f"{self.path}: the line at byte {self._offset} is not a record ({err})") from err
        if "enc" in record:
            from agent_saga.log.crypto import EncryptionKeyMissing, open_record

            try:
                return open_record(record, self.encryptor, self.path)
            except EncryptionKeyMissing:
                return record  # shown without its body: the type and header are still evidence
        return record


class WALSource:
    """Any ``WAL`` object, read through ``records()``; new records are those past the last seq."""

    def __init__(self, wal: WAL) -> None:
        self.wal = wal
        self._last = 0

    @property
    def location(self) -> str:
        return self.wal.location or repr(self.wal)

    def poll(self) -> Poll:
        records = list(self.wal.records())
        top = max((r["seq"] for r in records if isinstance(r.get("seq"), int)), default=0)
        if top < self._last:  # the log was replaced by a shorter one
            self._last = top
            return Poll(records, True)
        new = [r for r in records if isinstance(r.get("seq"), int) and r["seq"] > self._last]
        self._last = top
        return Poll(new, False)
