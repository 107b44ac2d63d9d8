"""Check a hash-chained log and name the first record that does not add up.

The rule (``VERIFICATION_RULE``, also written in prose into every export):

* a record's ``hash`` is SHA-256 of its canonical header (``digest, prev, saga,
  seq, step, ts, type``, those present);
* its ``digest`` is SHA-256 of ``salt`` (as bytes) followed by the canonical body,
  or by the ``enc`` text for an encrypted record; a redacted record has neither
  body nor salt and is checked by its header alone;
* ``seq`` strictly increases and ``prev`` is the ``hash`` of the record before it
  (64 zeros for the first);
* where ``seq`` jumps, a COMPACTION record later in the log must attest every
  missing sequence, and the next record's ``prev`` must equal the attested hash
  of the last removed one.

Erasing a body must be accounted for by a REDACTION record naming that seq.
A log written with ``chain=False`` is reported as unchained, never as intact.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from agent_saga.log.codec import canonical, chain_hash
from agent_saga.log.records import GENESIS, Record, RecordType

__all__ = [
    "VERIFICATION_RULE",
    "Entry",
    "VerifyReport",
    "parse_log_bytes",
    "verify_entries",
    "verify_log",
    "verify_records",
]

VERIFICATION_RULE = (
    "Each line of records.jsonl is one JSON record. Its header is the object made of the fields "
    "digest, prev, saga, seq, step, ts, type that the record has, serialised as canonical JSON "
    "(UTF-8, keys sorted, separators ',' and ':' with no spaces, non-ASCII characters written "
    "as themselves). hash must equal the lowercase hex SHA-256 of that header. If the record has "
    "body and salt, digest must equal SHA-256 over the 16 bytes whose hex is salt followed by the "
    "canonical JSON of body; if it has enc and salt (an encrypted body), SHA-256 over the salt "
    "bytes followed by the ASCII text of enc. A record with neither body nor salt was redacted: "
    "only its header is checked, and a REDACTION record must list its seq. seq must strictly "
    "increase from line to line; prev of the first record is 64 zeros (unless the head of the "
    "log was compacted away) and prev of every other record is the hash of the line before it. "
    "Where seq jumps, a COMPACTION record's body.removed ranges must cover every missing seq, "
    "and prev of the record after the gap must equal the attested last_hash of the range ending "
    "just before it. The hash of the last line is the chain head. The file's own SHA-256 is in "
    "manifest.json and SHA256SUMS (check with: sha256sum -c SHA256SUMS)."
)

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_COMPACTION = RecordType.COMPACTION.value
_REDACTION = RecordType.REDACTION.value


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a log: its number, the record (None if unreadable) and why not."""

    line: int
    record: Record | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdict over one log. ``ok`` only when every record is chained and adds up."""

    status: str  # "intact" | "broken" | "unchained" | "partial"
    records: int
    chained: int
    first_seq: int | None = None
    last_seq: int | None = None
    head: str | None = None  # hash of the last chained record
    bad_seq: int | None = None
    bad_line: int | None = None
    reason: str = ""
    redacted: tuple[int, ...] = ()
    compacted: tuple[tuple[int, int], ...] = ()  # attested removed ranges, inclusive
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.status == "intact"

    def __bool__(self) -> bool:
        return self.ok

    @property
    def label(self) -> str:
        """One phrase for manifests and pictures: intact, unchained, partial, BROKEN at seq N."""
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
        if self.records:
            lines.append(
                f"records: {self.records} (seq {self.first_seq}..{self.last_seq}), chained: {self.chained}"
            )
        else:
            lines.append("records: 0 (empty log)")
        if self.head:
            lines.append(f"head: {self.head}")
        if self.redacted:
            lines.append(f"redacted: {len(self.redacted)} record(s), seq {_ranges(self.redacted)}")
        if self.compacted:
            spans = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in self.compacted)
            lines.append(f"compacted away (attested): seq {spans}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


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


def parse_log_bytes(data: bytes) -> tuple[list[Entry], list[str]]:
    """Split a log file's bytes into entries; a torn final line is set aside with a note."""
    notes: list[str] = []
    entries: list[Entry] = []
    lines = data.split(b"\n")
    last = len(lines) - 1
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as err:
            if index == last and raw.lstrip().startswith(b"{"):
                notes.append(
                    f"a torn final line ({len(raw)} bytes, no newline) was ignored: it was never "
                    "acknowledged as durable"
                )
                break
            entries.append(Entry(index + 1, None, f"not JSON ({err})"))
            continue
        if not isinstance(value, dict):
            entries.append(Entry(index + 1, None, f"a JSON {type(value).__name__}, not an object"))
            continue
        entries.append(Entry(index + 1, value))
    return entries, notes


Progress = Callable[[int, int], None]  # (done, total): called now and then during long work


def verify_log(
    path: str | Path, *, expect_head: str | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Verify the log file at ``path`` (see the module docstring for the rule).

    ``expect_head`` is a chain head taken earlier (say, from an export manifest):
    the log must still hold the record with that hash, which catches records cut
    off the end — the one edit a chain cannot reveal by itself.
    Raises OSError if the file cannot be read.
    """
    data = Path(path).read_bytes()
    entries, notes = parse_log_bytes(data)
    return verify_entries(entries, expect_head=expect_head, notes=notes, progress=progress)


def verify_records(records: Iterable[Mapping[str, Any]], *, expect_head: str | None = None) -> VerifyReport:
    """Verify records already read (positions count from 1 as ``bad_line``)."""
    entries = [Entry(i, dict(r)) for i, r in enumerate(records, start=1)]
    return verify_entries(entries, expect_head=expect_head)


@dataclass(slots=True)
class _Attested:
    ranges: list[tuple[int, int]] = field(default_factory=list)
    claims: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # by attestation seq
    end_hash: dict[int, str] = field(default_factory=dict)
    redacted: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def covers(self, first: int, last: int) -> bool:
        need = first
        for a, b in sorted(self.ranges):
            if a > need:
                break
            need = max(need, b + 1)
            if need > last:
                return True
        return need > last


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _collect(entries: Sequence[Entry]) -> _Attested:
    """What the COMPACTION and REDACTION records of the log say (a first pass)."""
    att = _Attested()
    for e in entries:
        r = e.record
        if r is None or r.get("type") not in (_COMPACTION, _REDACTION):
            continue
        body = r.get("body")
        seq = r.get("seq")
        if not isinstance(body, dict) or not _is_int(seq):
            continue  # redacted or damaged: the main pass reports it if it matters
        if "hash" in r and _check_record(r):
            # An altered attestation vouches for nothing; the gaps it covered show up as such.
            att.notes.append(f"the {r['type']} record at seq {seq} does not verify; its claims were ignored")
            continue
        if r["type"] == _REDACTION:
            seqs = body.get("seqs")
            if isinstance(seqs, list):
                att.redacted.update(s for s in seqs if _is_int(s) and s < seq)
            continue
        removed = body.get("removed")
        if not isinstance(removed, list):
            att.notes.append(f"COMPACTION record seq {seq} has no 'removed' list; ignored")
            continue
        for item in removed:
            ok = (
                isinstance(item, dict) and _is_int(item.get("first")) and _is_int(item.get("last"))
                and 1 <= item["first"] <= item["last"] < seq
                and (item.get("last_hash") is None or _HEX64.match(str(item.get("last_hash"))))
            )
            if not ok:
                att.notes.append(f"COMPACTION record seq {seq} lists a malformed range {item!r}; ignored")
                continue
            att.ranges.append((item["first"], item["last"]))
            att.claims.setdefault(seq, []).append((item["first"], item["last"]))
            if item.get("last_hash") is not None:
                att.end_hash[item["last"]] = item["last_hash"]
    return att


def verify_entries(
    entries: Sequence[Entry],
    *,
    expect_head: str | None = None,
    notes: Sequence[str] = (),
    progress: Progress | None = None,
) -> VerifyReport:
    """The verifier proper, over parsed lines."""
    att = _collect(entries)
    all_notes = [*notes, *att.notes]
    chained = 0
    prev_seq = 0
    prev_hash: str | None = None
    first_seq: int | None = None
    head: str | None = None
    first_unchained: int | None = None
    hashes: set[str] = set()
    redacted: list[int] = []
    seen: list[int] = []  # every seq so far, ascending

    def report(status: str, **kw: Any) -> VerifyReport:
        return VerifyReport(
            status, len(entries), chained, first_seq, prev_seq or None, head,
            redacted=tuple(redacted), compacted=tuple(_merge(att.ranges)), notes=tuple(all_notes), **kw,
        )

    def broken(e: Entry, seq: int | None, reason: str) -> VerifyReport:
        return report("broken", bad_seq=seq, bad_line=e.line, reason=reason)

    total = len(entries)
    for done, e in enumerate(entries):
        if progress is not None and done % 4096 == 0:
            progress(done, total)
        r = e.record
        if r is None:
            return broken(e, None, f"line {e.line} is not a log record: {e.error}")
        raw_seq = r.get("seq")
        if not _is_int(raw_seq) or raw_seq < 1:
            return broken(
                e, raw_seq if _is_int(raw_seq) else None,
                f"line {e.line} has no valid seq (got {raw_seq!r}; sequences start at 1)",
            )
        seq = int(raw_seq)
        if not isinstance(r.get("type"), str) or not isinstance(r.get("saga"), str):
            return broken(e, seq, "the record lacks a type or saga field")
        if first_seq is None:
            first_seq = seq
        if seq <= prev_seq:
            return broken(e, seq, f"seq {seq} does not follow seq {prev_seq}: records reordered, duplicated or inserted")
        for lo, hi in att.claims.get(seq, ()) if r.get("type") == _COMPACTION else ():
            at = bisect.bisect_left(seen, lo)
            if at < len(seen) and seen[at] <= hi:
                return broken(
                    e, seq,
                    f"this COMPACTION record says seq {lo}..{hi} were removed, but seq {seen[at]} "
                    "is still in the log",
                )
        seen.append(seq)

        if "hash" not in r:
            if any(k in r for k in ("digest", "prev", "salt")):
                return broken(e, seq, "the record has chain fields but its hash was removed")
            if first_unchained is None:
                first_unchained = seq
            if seq != prev_seq + 1 and not att.covers(prev_seq + 1, seq - 1):
                return broken(e, seq, _gap_text(prev_seq, seq))
            prev_seq, prev_hash = seq, None
            continue

        problem = _check_record(r)
        if problem:
            return broken(e, seq, problem)
        if "body" not in r and "enc" not in r:
            if seq not in att.redacted:
                return broken(e, seq, "the body was erased but no REDACTION record accounts for it")
            redacted.append(seq)

        if seq == prev_seq + 1:
            expected = prev_hash if prev_hash is not None else (GENESIS if prev_seq == 0 else None)
            if expected is not None and r["prev"] != expected:
                before = f"seq {prev_seq}" if prev_seq else "the start of the log (64 zeros)"
                return broken(
                    e, seq,
                    f"prev does not link to {before}: a record was inserted, changed or removed before it",
                )
        else:
            if not att.covers(prev_seq + 1, seq - 1):
                return broken(e, seq, _gap_text(prev_seq, seq))
            attested = att.end_hash.get(seq - 1)
            if attested is None or r["prev"] != attested:
                return broken(
                    e, seq,
                    f"prev does not match the attested hash of removed seq {seq - 1}: the gap "
                    f"seq {prev_seq + 1}..{seq - 1} is not the one the compaction recorded",
                )
        chained += 1
        prev_seq, prev_hash = seq, r["hash"]
        head = prev_hash
        hashes.add(prev_hash)

    if expect_head is not None and expect_head not in hashes:
        # Name the line where the missing record would have been.
        return report(
            "broken", bad_seq=None, bad_line=entries[-1].line + 1 if entries else 1,
            reason=(
                f"the expected head {expect_head[:16]}... is not in the log "
                f"({f'it ends at seq {prev_seq}' if prev_seq else 'it is empty'}): "
                "records were cut off the end, or this is a different log"
            ),
        )
    if not entries:
        return report("intact")
    if chained == 0:
        return report("unchained", reason="written with chain=False: nothing proves it was not altered")
    if first_unchained is not None:
        unchained = len(entries) - chained
        return report("partial", reason=f"{unchained} record(s) carry no chain, the first at seq {first_unchained}")
    return report("intact")


def _gap_text(prev_seq: int, seq: int) -> str:
    missing = f"seq {prev_seq + 1}" if seq - 1 == prev_seq + 1 else f"seq {prev_seq + 1}..{seq - 1}"
    return f"{missing} missing and no COMPACTION attestation accounts for it: records were deleted"


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _check_record(r: Mapping[str, Any]) -> str:
    """Why one chained record does not add up on its own ('' when it does)."""
    try:
        return _check_fields(r)
    except UnicodeEncodeError:
        # The writer encodes strictly as UTF-8, so a lone surrogate was put there by hand.
        return "it holds text that is not valid UTF-8 (a lone surrogate), which no writer produces"


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
