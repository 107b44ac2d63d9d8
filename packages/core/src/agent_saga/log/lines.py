"""Lines of a log file, and the one rule for its last line.

A writer appends whole records, each followed by a newline, in one ``write``; a
barrier returns only after that write is synced. So a log can end in three ways,
and every reader and writer of this library treats them alike:

* with a newline: every line is complete;
* with a final line that parses as a JSON object but lacks its newline: the
  record is **complete** (a JSON object cannot parse until its closing brace is
  there). It counts as a record everywhere — verify, recovery, export — and the
  next writer adds the missing newline before appending. Setting it aside would
  turn a committed step into an unknown one;
* with a final fragment that does not parse and begins as a record begins (``{``)
  or with the NUL bytes a crash can leave in a block it never wrote: a **torn**
  write, never acknowledged as durable. Readers skip it (with a note); a writer
  moves it to ``<log>.torn-<offset>`` before appending.

Anything else that does not parse, anywhere, is damage: a reader reports it and
a writer refuses to append after it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["Line", "ReadMark", "is_torn", "iter_lines", "parses"]

_BLOCK = 1 << 20
_MARK = 64  # bytes kept from just before a follower's offset: the end of the last record, its hash


def parses(raw: bytes) -> bool:
    """Whether ``raw`` is one complete JSON value (a final line that counts as written)."""
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


def is_torn(raw: bytes) -> bool:
    """Whether an unterminated final line is a torn write (see the module docstring)."""
    head = raw.lstrip(b" \t\r")
    return (head[:1] in (b"{", b"\x00") or not head) and not parses(raw)


class Line:
    """One line of a log file: its number (from 1), where it starts, its bytes without the newline."""

    __slots__ = ("number", "offset", "raw", "terminated")

    def __init__(self, number: int, offset: int, raw: bytes, terminated: bool) -> None:
        self.number = number
        self.offset = offset
        self.raw = raw
        self.terminated = terminated

    @property
    def end(self) -> int:
        """The offset just past this line (and its newline, if it has one)."""
        return self.offset + len(self.raw) + self.terminated


def iter_lines(fh: BinaryIO, start: int = 0, stop: int | None = None) -> Iterator[Line]:
    """The lines of ``fh`` from byte ``start`` to ``stop`` (default: its end), one at a time.

    Memory holds one line and one read block, never the file. Blank lines are
    yielded too (callers skip them), so that line numbers match an editor's.
    """
    fh.seek(start)
    offset = start
    number = 0
    remaining = -1 if stop is None else stop - start
    carry = b""
    while remaining != 0:
        block = fh.read(_BLOCK if remaining < 0 else min(_BLOCK, remaining))
        if not block:
            break
        if remaining > 0:
            remaining -= len(block)
        data = carry + block if carry else block
        begin = 0
        while True:
            end = data.find(b"\n", begin)
            if end < 0:
                break
            number += 1
            yield Line(number, offset, data[begin:end], True)
            offset += end - begin + 1
            begin = end + 1
        carry = data[begin:]
    if carry:
        yield Line(number + 1, offset, carry, False)


@dataclass(frozen=True, slots=True)
class ReadMark:
    """Where a follower of a log file stopped: the file (its inode), the offset, the bytes before it.

    A log is rewritten (compaction, redaction) by renaming a new file over it, and a
    filesystem may give that file the inode an earlier rewrite freed (ext4 does): two
    rewrites between two polls then leave the inode unchanged. The bytes before the
    offset, which an append never changes, tell the file apart.
    """

    inode: int
    offset: int
    before: bytes

    @classmethod
    def take(cls, fh: BinaryIO, offset: int) -> ReadMark:
        """The mark of ``fh`` read up to ``offset``."""
        size = min(_MARK, offset)
        return cls(os.fstat(fh.fileno()).st_ino, offset, os.pread(fh.fileno(), size, offset - size))

    def holds(self, fh: BinaryIO) -> bool:
        """Whether ``fh`` is the file this mark was taken of, only appended to since."""
        stat = os.fstat(fh.fileno())
        if stat.st_ino != self.inode or stat.st_size < self.offset:
            return False
        return os.pread(fh.fileno(), len(self.before), self.offset - len(self.before)) == self.before
