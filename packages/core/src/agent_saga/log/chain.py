"""Check a log's hash chain, streaming, and name the first record that does not add up.

The rule (see ``codec`` for how records are sealed, and ``agent_saga.audit._verify``
for the same rule in prose):

* a record's ``hash`` is SHA-256 of its canonical header (``digest, prev, saga,
  seq, step, ts, type``, those present);
* its ``digest`` is SHA-256 of ``salt`` (as bytes) followed by the canonical body,
  or by the ``enc`` text of an encrypted record; a redacted record has neither
  body nor salt, is checked by its header alone, and a REDACTION record must
  name its seq;
* ``seq`` strictly increases and ``prev`` is the ``hash`` of the record before
  (64 zeros for the first);
* where ``seq`` jumps, a COMPACTION record later in the log must attest every
  missing sequence, and the next record's ``prev`` must equal the attested hash
  of the last removed one;
* a COMPACTION or REDACTION record counts only when it is signed by a trusted
  operator key (``log.attestation``) and adds up: a compaction names every saga
  whose records it removed with that saga's terminal record (SAGA_COMPLETED, or
  SAGA_ROLLED_BACK with ``clean: true``), and its counts and ranges match. One
  that does not is a break: the agent writes its own log, so an attestation
  nobody trusted signed could hide a saga that still needs an undo.

Chained or not. Once a log holds a chained record, every later record must be
chained and linked to the one before: a record without chain fields there is a
break, never "partial" — no writer of a chained log writes one, so it was added
or rewritten by hand. A log written with ``chain=False`` is *unchained*; one
that starts unchained and continues chained (a writer was switched on later) is
*partial*. Neither is *intact*: nothing proves their unchained records were not
edited. Only ``intact`` and ``empty`` are ``ok``.

Memory. Checking is streaming: a first pass collects what COMPACTION and
REDACTION records attest (bounded by the number of attestations), the second
checks record by record holding only the previous record's hash. A log of any
length is checked in constant memory beyond that.

This module sits in the log layer because recovery and audit both refuse to act
on a log that does not verify, and neither may import the other.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from agent_saga.errors import WALError
from agent_saga.inert import inert
from agent_saga.log.attestation import OperatorKeys
from agent_saga.log.codec import canonical, chain_hash
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import Line, is_torn, iter_lines
from agent_saga.log.records import GENESIS, Record, RecordType

__all__ = [
    "Attestations",
    "ChainChecker",
    "ChainUnverified",
    "Progress",
    "VerifyReport",
    "check_record",
    "read_line",
    "verify_file",
    "verify_records",
]

Progress = Callable[[int, int], None]  # (done, total), called now and then during long work

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_COMPACTION = RecordType.COMPACTION.value
_REDACTION = RecordType.REDACTION.value
_REPAIR = "REPAIR_"  # an operator's repair session on one saga (agent_saga.recovery.repair)
_COMPLETED = RecordType.SAGA_COMPLETED.value
_ROLLED_BACK = RecordType.SAGA_ROLLED_BACK.value
_CHAIN_FIELDS = ("digest", "prev", "salt")
# Only lines holding one of these words can be attestations; the first pass parses no other.
# (A writer never escapes ASCII, so a real attestation always contains its type verbatim; one
# hidden behind escapes attests nothing, which can only make the verdict stricter.)
_ATTESTATION_WORDS = (_COMPACTION.encode(), _REDACTION.encode())
_PROGRESS_EVERY = 4096  # lines


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdict over one log. ``ok`` when every record is chained and adds up (or there is none)."""

    status: str  # "intact" | "empty" | "broken" | "unchained" | "partial"
    records: int
    chained: int
    first_seq: int | None = None
    last_seq: int | None = None  # the last seq checked (before the break, if broken)
    head: str | None = None  # hash of the last chained record checked
    bad_seq: int | None = None
    bad_line: int | None = None
    reason: str = ""
    redacted: tuple[int, ...] = ()
    compacted: tuple[tuple[int, int], ...] = ()  # attested removed ranges, inclusive
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.status in ("intact", "empty")

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first_bad(self) -> str:
        """Where the first problem is: ``seq N (line L)``, ``line L``, or '' when there is none."""
        if self.status == "broken":
            if self.bad_seq is not None:
                return f"seq {self.bad_seq} (line {self.bad_line})"
            return f"line {self.bad_line}"
        if self.status in ("unchained", "partial"):
            return f"seq {self.first_seq}" if self.first_seq is not None else "line 1"
        return ""

    @property
    def label(self) -> str:
        """One phrase for manifests and messages: intact, empty, unchained, partial ..., BROKEN at seq N: why."""
        if self.status == "broken":
            where = f"seq {self.bad_seq}" if self.bad_seq is not None else (
                f"line {self.bad_line}" if self.bad_line is not None else "the end"
            )
            return f"BROKEN at {where}: {self.reason}"
        if self.status == "partial":
            return f"partial ({self.chained} of {self.records} records chained): {self.reason}"
        return self.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "ok": self.ok, "label": self.label, "records": self.records,
            "chained": self.chained, "first_seq": self.first_seq, "last_seq": self.last_seq,
            "head": self.head, "bad_seq": self.bad_seq, "bad_line": self.bad_line,
            "reason": self.reason, "redacted": list(self.redacted),
            "compacted": [list(r) for r in self.compacted], "notes": list(self.notes),
        }

    def format_text(self) -> str:
        lines = [f"chain: {self.label}"]
        checked = f"seq {self.first_seq}..{self.last_seq}" if self.first_seq is not None else ""
        if not self.records:
            lines.append("records: 0 (empty log: nothing to verify)")
        elif self.status == "broken":
            before = f"{checked} checked before the break" if checked else "none checked before the break"
            lines.append(f"records: {self.records} ({before}), chained: {self.chained}")
        else:
            lines.append(f"records: {self.records} ({checked}), chained: {self.chained}")
        if self.head:
            lines.append(f"head: {self.head}")
        if self.redacted:
            lines.append(f"redacted: {len(self.redacted)} record(s), seq {_ranges(self.redacted)}")
        if self.compacted:
            spans = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in self.compacted)
            lines.append(f"compacted away (attested): seq {spans}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


class ChainUnverified(WALError):
    """A log's chain does not verify (broken, unchained or partial): ``report`` says where and why.

    Recovery, certify and export raise it rather than act on, vouch for or ship a
    log that may have been edited; each names its own override.
    """

    def __init__(self, message: str, report: VerifyReport) -> None:
        super().__init__(message)
        self.report = report

    @classmethod
    def refusing(cls, path: str | os.PathLike[str], report: VerifyReport, what: str, override: str) -> ChainUnverified:
        """The one message every refusal uses: the verdict, the first bad record, the override."""
        if report.status == "broken":
            why = f"the chain is broken at {report.first_bad}: {report.reason}"
        elif report.status == "unchained":
            why = "the log carries no hash chain (written with chain=False): nothing proves it was not edited"
        else:
            why = f"the log is only partly chained ({report.reason}): nothing proves the unchained records were not edited"
        return cls(f"{path}: {why}. Refusing to {what}; {override}", report)


def _ranges(seqs: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = seqs[0]
    for s in [*seqs[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}..{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Attestations:
    """What the COMPACTION and REDACTION records of a log vouch for (the first pass).

    An attestation counts only when a trusted operator key signed it and it adds up
    (see the module docstring); one that does not is kept in ``rejected`` (its seq ->
    why), so that the second pass breaks at it and names it where its claims matter.
    ``keys`` are the trusted operator keys (default: the host's, read on the first
    attestation met).
    """

    def __init__(self, keys: OperatorKeys | None = None) -> None:
        self.claims: dict[int, list[tuple[int, int]]] = {}  # attestation seq -> removed ranges
        self.end_hash: dict[int, str] = {}  # last seq of a removed range -> its hash
        self.redacted: set[int] = set()
        self.notes: list[str] = []
        self.rejected: dict[int, str] = {}  # attestation seq -> why it cannot be trusted
        self._rejected_ranges: list[tuple[int, int, int]] = []  # (first, last, attestation seq)
        self._rejected_seqs: dict[int, int] = {}  # redacted seq -> the rejected REDACTION's seq
        self._keys = keys
        self._merged: list[tuple[int, int]] | None = None

    @classmethod
    def scan(cls, lines: Iterable[Line], keys: OperatorKeys | None = None) -> Attestations:
        """Collect attestations from a log's lines, parsing only those that can hold one."""
        att = cls(keys)
        for line in lines:
            raw = line.raw
            if not any(word in raw for word in _ATTESTATION_WORDS):
                continue
            try:
                value = json.loads(raw)
            except ValueError:
                continue  # the second pass reports it if it matters
            if isinstance(value, dict):
                att.add(value)
        return att

    @classmethod
    def of(cls, records: Iterable[Mapping[str, Any]], keys: OperatorKeys | None = None) -> Attestations:
        att = cls(keys)
        for r in records:
            att.add(r)
        return att

    @property
    def keys(self) -> OperatorKeys:
        if self._keys is None:
            self._keys = OperatorKeys.load()
        return self._keys

    def add(self, r: Mapping[str, Any]) -> None:
        if r.get("type") not in (_COMPACTION, _REDACTION):
            return
        body = r.get("body")
        seq = r.get("seq")
        if not isinstance(body, dict) or not _is_int(seq):
            return  # redacted or damaged: the second pass reports it if it matters
        if "hash" in r and check_record(r):
            # An altered attestation vouches for nothing; the gaps it covered show up as such.
            self.notes.append(f"the {r['type']} record at seq {seq} does not verify; its claims were ignored")
            return
        self._merged = None
        problem = self.keys.problem(r) or (
            _redaction_problem(body, seq) if r["type"] == _REDACTION else _compaction_problem(body, seq)
        )
        if problem:
            self.rejected[seq] = f"the {r['type']} record at seq {seq} cannot be trusted: {problem}"
            if r["type"] == _REDACTION:
                seqs = body.get("seqs")
                for s in seqs if isinstance(seqs, list) else ():
                    if _is_int(s):
                        self._rejected_seqs.setdefault(s, seq)
            else:
                removed = body.get("removed")
                for item in removed if isinstance(removed, list) else ():
                    if isinstance(item, dict) and _is_int(item.get("first")) and _is_int(item.get("last")):
                        self._rejected_ranges.append((item["first"], item["last"], seq))
            return
        if r["type"] == _REDACTION:
            self.redacted.update(body["seqs"])
            return
        for item in body["removed"]:
            self.claims.setdefault(seq, []).append((item["first"], item["last"]))
            if item.get("last_hash") is not None:
                self.end_hash[item["last"]] = item["last_hash"]

    def rejected_for_gap(self, first: int, last: int) -> str:
        """Why the rejected COMPACTION that claims part of seq ``first..last`` cannot be trusted ('' if none)."""
        for a, b, seq in self._rejected_ranges:
            if a <= last and first <= b:
                return self.rejected[seq]
        return ""

    def rejected_for_erasure(self, seq: int) -> str:
        """Why the rejected REDACTION that names ``seq`` cannot be trusted ('' if none)."""
        at = self._rejected_seqs.get(seq)
        return self.rejected[at] if at is not None else ""

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """Every attested removed range, merged."""
        if self._merged is None:
            self._merged = _merge(r for claims in self.claims.values() for r in claims)
        return self._merged

    def covers(self, first: int, last: int) -> bool:
        # Merged ranges are disjoint: a covered span lies inside the one starting at or before it.
        at = bisect.bisect_right(self.ranges, first, key=lambda r: r[0]) - 1
        return at >= 0 and self.ranges[at][1] >= last

    def claimed(self, seq: int) -> bool:
        return self.covers(seq, seq)


class ChainChecker:
    """Feed it a log's records in order; it finds the first break and judges each record.

    ``feed`` returns whether the record is *sound on its own*: its hash and digest
    check (or it lies in a legitimately unchained region). A record that is not
    sound is never to be acted on, even by someone who chose to trust a broken
    chain: an edited record, or a line without chain fields inside a chained log.
    """

    def __init__(self, attestations: Attestations | None = None, *, expect_head: str | None = None) -> None:
        self.att = attestations or Attestations()
        self.expect_head = expect_head
        self.records = 0
        self.chained = 0
        self.unchained = 0
        self.first_seq: int | None = None
        self.first_chained: int | None = None
        self.prev_seq = 0
        self.prev_hash: str | None = None
        self.head: str | None = None
        self.head_found = False
        self.last_line = 0
        self.redacted: list[int] = []
        self.notes: list[str] = []
        self._seen_claimed: list[int] = []  # seqs still present although an attestation says removed
        self._break: tuple[int | None, int, str] | None = None  # (seq, line, reason)

    @property
    def broken(self) -> bool:
        return self._break is not None

    def feed(self, line: int, record: Mapping[str, Any] | None, error: str = "") -> bool:
        """Check the next record (``None`` with ``error`` for a line that is not one)."""
        self.records += 1
        self.last_line = line
        if record is None:
            self._broke(None, line, f"line {line} is not a log record: {error}")
            return False
        raw_seq = record.get("seq")
        if not _is_int(raw_seq) or raw_seq < 1:
            seq = raw_seq if _is_int(raw_seq) else None
            self._broke(seq, line, f"line {line} has no valid seq (got {raw_seq!r}; sequences start at 1)")
            return False
        seq = int(raw_seq)
        problem = self._own_problem(record, seq)
        if problem:
            self._broke(seq, line, problem)
            return False
        if self._break is None:
            link = self._link_problem(record, seq)
            if link:
                self._broke(seq, line, link)
            else:
                self._advance(record, seq)
        if str(record.get("type")).startswith(_REPAIR) and isinstance(record.get("body"), dict):
            self._operator_claim(record, seq)
        return True

    def _operator_claim(self, r: Mapping[str, Any], seq: int) -> None:
        """Note an operator's act on a saga (a repair) that no trusted operator key signed: a claim, not a break.

        Logs written before repairs were signed stay readable; what their unsigned records
        say is shown as a name, never acted on (``agent_saga.recovery.fold``).
        """
        problem = self.att.keys.saga_problem(r)
        if problem:
            who = inert(str(r["body"].get("operator", "?")))
            self.notes.append(f"the {r['type']} record at seq {seq} names operator {who} (unsigned): {problem}; "
                              "it is a claim, not a repair")

    def _own_problem(self, r: Mapping[str, Any], seq: int) -> str:
        """Why this record does not add up by itself ('' when it does)."""
        if not isinstance(r.get("type"), str) or not isinstance(r.get("saga"), str):
            return "the record lacks a type or saga field"
        if seq in self.att.rejected and r["type"] in (_COMPACTION, _REDACTION):
            return self.att.rejected[seq]
        if "hash" not in r:
            if any(k in r for k in _CHAIN_FIELDS):
                return "the record has chain fields but its hash was removed"
            if self.first_chained is not None:
                return (
                    "the record carries no hash chain inside a chained log: no writer of this log "
                    "wrote it (a line added or rewritten by hand)"
                )
            return ""
        problem = check_record(r)
        if problem:
            return problem
        if "body" not in r and "enc" not in r and seq not in self.att.redacted:
            rejected = self.att.rejected_for_erasure(seq)
            if rejected:
                return f"the body was erased, and {rejected}"
            return "the body was erased but no REDACTION record accounts for it"
        if self.first_chained is None:
            self.first_chained = seq
        return ""

    def _link_problem(self, r: Mapping[str, Any], seq: int) -> str:
        """Why this record does not follow the one before ('' when it does)."""
        prev_seq = self.prev_seq
        if seq <= prev_seq:
            return f"seq {seq} does not follow seq {prev_seq}: records reordered, duplicated or inserted"
        if self.att.claimed(seq):
            self._seen_claimed.append(seq)
        for lo, hi in self.att.claims.get(seq, ()) if r.get("type") == _COMPACTION else ():
            at = bisect.bisect_left(self._seen_claimed, lo)
            if at < len(self._seen_claimed) and self._seen_claimed[at] <= hi:
                return (
                    f"this COMPACTION record says seq {lo}..{hi} were removed, but seq "
                    f"{self._seen_claimed[at]} is still in the log"
                )
        gap = seq != prev_seq + 1
        if gap and not self.att.covers(prev_seq + 1, seq - 1):
            missing = f"seq {prev_seq + 1}" if seq - 1 == prev_seq + 1 else f"seq {prev_seq + 1}..{seq - 1}"
            rejected = self.att.rejected_for_gap(prev_seq + 1, seq - 1)
            if rejected:
                return f"{missing} missing, and {rejected}"
            return f"{missing} missing and no COMPACTION attestation accounts for it: records were deleted"
        if "hash" not in r:
            return ""  # an unchained region: nothing links
        if gap:
            attested = self.att.end_hash.get(seq - 1)
            if attested is None or r["prev"] != attested:
                return (
                    f"prev does not match the attested hash of removed seq {seq - 1}: the gap "
                    f"seq {prev_seq + 1}..{seq - 1} is not the one the compaction recorded"
                )
            return ""
        # The first chained record after an unchained start links to nothing, as a writer does.
        expected = self.prev_hash if self.prev_hash is not None else GENESIS
        if r["prev"] != expected:
            before = f"seq {prev_seq}" if self.prev_hash is not None else "the start of the chain (64 zeros)"
            return f"prev does not link to {before}: a record was inserted, changed or removed before it"
        return ""

    def _advance(self, r: Mapping[str, Any], seq: int) -> None:
        if self.first_seq is None:
            self.first_seq = seq
        self.prev_seq = seq
        if "hash" not in r:
            self.unchained += 1
            self.prev_hash = None
            return
        if "body" not in r and "enc" not in r:
            self.redacted.append(seq)
        self.chained += 1
        self.prev_hash = self.head = str(r["hash"])
        if self.head == self.expect_head:
            self.head_found = True

    def _broke(self, seq: int | None, line: int, reason: str) -> None:
        if self._break is None:
            self._break = (seq, line, reason)

    def count(self, line: int) -> None:
        """Count a record that is not checked (the rest of a log after its first break)."""
        self.records += 1
        self.last_line = line

    def report(self, notes: Sequence[str] = ()) -> VerifyReport:
        """The verdict over everything fed so far."""
        def make(status: str, seq: int | None = None, line: int | None = None, reason: str = "") -> VerifyReport:
            return VerifyReport(
                status, self.records, self.chained, self.first_seq, self.prev_seq or None, self.head,
                seq, line, reason, tuple(self.redacted), tuple(self.att.ranges),
                (*notes, *self.att.notes, *self.notes),
            )

        if self._break is not None:
            return make("broken", *self._break)
        if self.expect_head is not None and not self.head_found:
            return make(
                "broken", None, self.last_line + 1,
                f"the expected head {self.expect_head[:16]}... is not in the log "
                f"({f'it ends at seq {self.prev_seq}' if self.prev_seq else 'it is empty'}): "
                "records were cut off the end, or this is a different log",
            )
        if not self.records:
            return make("empty")
        if not self.chained:
            return make("unchained", reason="written with chain=False: nothing proves it was not altered")
        if self.unchained:
            return make("partial", reason=(
                f"the first {self.unchained} record(s) carry no chain; it starts at seq {self.first_chained}"
            ))
        return make("intact")


def read_line(line: Line) -> tuple[Record | None, str]:
    """Parse one line of a log: the record, or None and why it is not one."""
    try:
        value = json.loads(line.raw)
    except ValueError as err:
        return None, f"not JSON ({err})"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, ""


def verify_file(
    path: str | os.PathLike[str], *, expect_head: str | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Verify the log file at ``path``, streaming (see the module docstring for the rule).

    ``expect_head`` is a chain head taken earlier (say, from an export manifest):
    the log must still hold the record with that hash, which catches records cut
    off the end — the one edit a chain cannot reveal by itself. Raises OSError
    (``NotARegularFile`` for a directory, FIFO or device) if the file cannot be read.
    """
    with open_regular(path) as fh:
        size = fh.seek(0, 2)
        att = Attestations.scan(iter_lines(fh, 0, size))
        checker = ChainChecker(att, expect_head=expect_head)
        notes = check_lines(iter_lines(fh, 0, size), checker, progress=progress, total=size)
    return checker.report(notes)


def check_lines(
    lines: Iterable[Line],
    checker: ChainChecker,
    *,
    on_record: Callable[[Record], None] | None = None,
    progress: Progress | None = None,
    total: int = 0,
) -> list[str]:
    """Feed a log's lines to ``checker``, applying the final-line rule of ``agent_saga.log.lines``.

    Past the first break the rest is only counted, unless ``on_record`` wants every
    record that parses (certify under an override). Returns notes about the tail.
    """
    notes: list[str] = []
    for line in lines:
        if progress is not None and line.number % _PROGRESS_EVERY == 0:
            progress(line.offset, total)
        if not line.raw.strip():
            continue
        if not line.terminated and is_torn(line.raw):
            notes.append(
                f"a torn final line ({len(line.raw)} bytes, no newline) was ignored: it was never "
                "acknowledged as durable"
            )
            break
        if checker.broken and on_record is None:
            checker.count(line.number)
            continue
        record, error = read_line(line)
        if checker.broken:
            checker.count(line.number)
        else:
            checker.feed(line.number, record, error)
        if record is None:
            continue
        if not line.terminated:
            notes.append("the last record has no trailing newline; it is complete and counts as written")
        if on_record is not None:
            on_record(record)
    return notes


def verify_records(records: Iterable[Mapping[str, Any]], *, expect_head: str | None = None) -> VerifyReport:
    """Verify records already read (positions count from 1 as ``bad_line``)."""
    items = [dict(r) for r in records]
    checker = ChainChecker(Attestations.of(items), expect_head=expect_head)
    for number, record in enumerate(items, start=1):
        if checker.broken:
            checker.count(number)
        else:
            checker.feed(number, record)
    return checker.report()


def check_record(r: Mapping[str, Any]) -> str:
    """Why one chained record does not add up on its own ('' when it does)."""
    try:
        return _check_fields(r)
    except UnicodeEncodeError:
        # The writer encodes strictly as UTF-8, so a lone surrogate was put there by hand.
        return "it holds text that is not valid UTF-8 (a lone surrogate), which no writer produces"
    except ValueError:
        # JSON reads 1e999 as infinity, which the canonical form refuses: the writer never wrote it.
        return "it holds a number out of range (infinite or NaN), which no writer produces"


def _check_fields(r: Mapping[str, Any]) -> str:
    for k in ("hash", "digest", "prev"):
        if not isinstance(r.get(k), str) or not _HEX64.match(r[k]):
            return f"its {k} is not a 64-character lowercase hex SHA-256"
    if not _is_int(r.get("ts")):
        return "its ts is not an integer"
    if "step" in r and not _is_int(r["step"]):
        return "its step is not an integer"
    if chain_hash(r) != r["hash"]:
        return "the header does not match its hash: a header field (seq, ts, type, saga, step, digest, prev) was changed"
    has_salt = "salt" in r
    content: bytes | None
    if "enc" in r:
        content = r["enc"].encode() if isinstance(r["enc"], str) else None
        if content is None:
            return "its enc field is not text"
    elif "body" in r:
        content = canonical(r["body"]).encode()
    else:
        content = None
    if content is None:
        return "" if not has_salt else "the body was erased but its salt was kept (erase both)"
    if not has_salt:
        return "the body is present but its salt is missing, so its digest cannot be checked"
    salt = r["salt"]
    if not isinstance(salt, str) or not _HEX32.match(salt):
        return "its salt is not 32 lowercase hex characters"
    if hashlib.sha256(bytes.fromhex(salt) + content).hexdigest() != r["digest"]:
        return "the body does not match its digest: the body or its salt was changed"
    return ""


def _redaction_problem(body: Mapping[str, Any], seq: int) -> str:
    """Why a signed REDACTION body does not add up ('' when it does)."""
    seqs = body.get("seqs")
    if not isinstance(seqs, list) or not seqs or not all(_is_int(s) and 1 <= s < seq for s in seqs):
        return "its 'seqs' must list the erased records' sequences, each below its own"
    return ""


def _compaction_problem(body: Mapping[str, Any], seq: int) -> str:
    """Why a signed COMPACTION body does not add up ('' when it does).

    Its ranges must be ascending and disjoint, below its own seq, each with a count
    matching it and (in a chained log) the hash of its last record; ``records`` must
    be their total; and ``sagas`` must account for every removed record, each saga
    with its terminal record among the removed ones (checked against its own hash
    and, where it ends a range, the attested one).
    """
    removed = body.get("removed")
    if not isinstance(removed, list) or not removed:
        return "its 'removed' list of ranges is missing or empty"
    total, after = 0, 0
    ranges: list[tuple[int, int]] = []
    end_hash: dict[int, Any] = {}
    for item in removed:
        ok = (
            isinstance(item, dict)
            and all(_is_int(item.get(k)) for k in ("first", "last", "count"))
            and after < item["first"] <= item["last"] < seq
            and item["count"] == item["last"] - item["first"] + 1
            # None: the run ended in an unchained record (a partial log); a chained record after
            # the gap then has nothing to link to, which the second pass reports.
            and (item.get("last_hash") is None or _HEX64.match(str(item.get("last_hash"))))
            and _HEX64.match(str(item.get("hashes_sha256")))
        )
        if not ok:
            return (
                f"it lists a malformed removed range {item!r} (ascending first..last below its own seq, "
                "count = last - first + 1, last_hash and hashes_sha256 as SHA-256 hex)"
            )
        total += item["count"]
        after = item["last"]
        ranges.append((item["first"], item["last"]))
        end_hash[item["last"]] = item.get("last_hash")
    if body.get("records") != total:
        return f"it says {body.get('records')!r} records were removed, but its ranges hold {total}"
    sagas = body.get("sagas")
    if not isinstance(sagas, list) or not sagas:
        return "it names no removed saga: every saga whose records it removes must be named with its terminal record"
    named = 0
    seen: set[str] = set()
    for entry in sagas:
        saga = entry.get("saga") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict) or not isinstance(saga, str) or not saga or saga in seen
            or not _is_int(entry.get("records")) or entry["records"] < 1
        ):
            return f"it names a removed saga as {entry!r}; each needs a distinct 'saga', 'records' >= 1 and 'terminal'"
        seen.add(saga)
        problem = _terminal_problem(entry.get("terminal"), saga, ranges, end_hash)
        if problem:
            return f"removed saga {saga!r} {problem}"
        named += entry["records"]
    if named != total:
        return f"its sagas account for {named} removed records, but its ranges hold {total}"
    return ""


def _terminal_problem(t: object, saga: str, ranges: list[tuple[int, int]], end_hash: Mapping[int, Any]) -> str:
    """Why ``t`` is not ``saga``'s settled terminal record among the removed ones ('' when it is)."""
    if not isinstance(t, dict):
        return "is named without its terminal record (its SAGA_COMPLETED or clean SAGA_ROLLED_BACK)"
    tseq = t.get("seq")
    if not _is_int(tseq) or not any(a <= tseq <= b for a, b in ranges):
        return f"names a terminal record (seq {tseq!r}) that is not among the records removed"
    if t.get("saga") != saga:
        return f"names as its terminal record seq {tseq}, which belongs to saga {t.get('saga')!r}"
    if "hash" in t:
        problem = check_record(t)
        if problem:
            return f"names a terminal record (seq {tseq}) that does not add up: {problem}"
    if end_hash.get(tseq) is not None and end_hash[tseq] != t.get("hash"):
        return f"names a terminal record whose hash is not the attested hash of removed seq {tseq}"
    rtype, tbody = t.get("type"), t.get("body")
    if rtype == _COMPLETED:
        return ""
    if rtype == _ROLLED_BACK and ((isinstance(tbody, dict) and tbody.get("clean") is True) or "enc" in t):
        return ""  # an encrypted body is not readable here: the operator's signature vouches for it
    what = "a SAGA_ROLLED_BACK that is not clean" if rtype == _ROLLED_BACK else f"a {rtype}"
    return (
        f"was not settled: the record named as its terminal, seq {tseq}, is {what} (only SAGA_COMPLETED "
        "or a clean SAGA_ROLLED_BACK settles a saga; anything else may still need an undo)"
    )
