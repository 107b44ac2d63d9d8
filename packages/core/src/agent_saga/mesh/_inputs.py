"""Read one input of a mesh merge and keep only what verifies, naming the first thing that does not.

An input is a device's own log (every record written by that device, chained from
64 zeros) or a merged log this package wrote (``MESH_MERGED`` first, then each
device record re-homed, carrying its origin under ``"mesh"``). Either way the
device records are checked the way ``agent-saga verify`` checks a log, in the
order the input holds them (``agent_saga.log.chain.ChainChecker``): a record that
was altered, forged, reordered, or follows a gap (a copy truncated in the middle)
breaks the device's chain *in this input* at that record. The break is named
(device, seq, why) and nothing from that point on is taken from this input for
that device: what comes after a break cannot be tied to the device's history.
The records before it are the input's contribution.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.log.attestation import OperatorKeys
from agent_saga.log.chain import Attestations, ChainChecker, check_record, read_line
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import AUDIT_SAGA, Record, RecordType

__all__ = [
    "FORMAT",
    "MESH_FIELD",
    "Exclusion",
    "MeshError",
    "Taken",
    "origin_of",
    "take",
]

#: The top-level field of a merged record naming where it came from (not covered by the merged chain's hash,
#: so every merge re-checks it against the device's own chain: see ``origin_of``).
MESH_FIELD = "mesh"
#: ``body.format`` of a merged log's MESH_MERGED record.
FORMAT = "agent-saga mesh v1"
_MERGED = RecordType.MESH_MERGED.value
# What a device record is made of: its chain header, body, salt and hash. Anything else on the line is not
# covered by its hash, so it is not part of the record and is not carried into the merge.
_FIELDS = ("digest", "prev", "saga", "seq", "step", "ts", "type", "body", "salt", "hash")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_REWRITTEN = (RecordType.COMPACTION.value, RecordType.REDACTION.value)
#: How a torn final write is named: a writer died mid-line; never acknowledged, so never merged.
TORN = "a torn final write"


class MeshError(ConfigurationError):
    """An input the merge cannot use at all (unreadable, unchained, encrypted, compacted): nothing was written."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A record that was not merged: which device, which seq, why, and from which input.

    ``held`` counts the records from ``seq`` on that were left out with it (the
    rest of that device's chain in that input, or in the pool for a fork), and
    ``through`` is the last seq among them (None when it is ``seq`` or unknown).
    """

    device: str
    seq: int | None
    why: str
    source: str = ""  # the input it came from ('' for a verdict over every input: a fork)
    held: int = 1
    through: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "seq": self.seq, "why": self.why, "source": self.source, "held": self.held,
                "through": self.through}

    @property
    def where(self) -> str:
        """Which records, as people read it: ``seq 4``, ``seq 4..7``, or ``a line`` when none has a seq."""
        if self.seq is None:
            return "a line" if self.through is None else f"seq ..{self.through}"
        return f"seq {self.seq}" if self.through in (None, self.seq) else f"seq {self.seq}..{self.through}"


@dataclass(slots=True)
class Taken:
    """What one input contributes: each device's verified records, in seq order, and what it held back."""

    source: str
    devices: dict[str, list[Record]] = field(default_factory=dict)
    held: list[tuple[str, Record]] = field(default_factory=list)  # a merged input's held-out records
    excluded: list[Exclusion] = field(default_factory=list)


def _device_record(r: Mapping[str, Any]) -> Record:
    return {k: r[k] for k in _FIELDS if k in r}


def origin_of(r: Mapping[str, Any]) -> tuple[str, Record] | None:
    """The device and the device's own record behind a merged record (None when it carries no origin)."""
    origin = r.get(MESH_FIELD)
    if not isinstance(origin, dict) or not isinstance(origin.get("device"), str):
        return None
    own = _device_record(r)
    for k in ("seq", "prev", "hash", "step"):
        if k in origin:
            own[k] = origin[k]
        else:
            own.pop(k, None)
    return origin["device"], own


def _lines(path: Path) -> Iterator[tuple[int, Record | None, str]]:
    with open_regular(path) as fh:
        for line in iter_lines(fh):
            if not line.raw.strip():
                continue
            if not line.terminated and is_torn(line.raw):
                # Never acknowledged as durable (agent_saga.log.lines), so not part of the log; but what the
                # copy holds is left out, and a merge names everything it leaves out.
                yield line.number, None, f"{TORN} ({len(line.raw)} bytes at the end, no newline, not a record)"
                return
            record, error = read_line(line)
            yield line.number, record, error


def _items(source: Any, name: str) -> Iterator[tuple[int, Record | None, str]]:
    if isinstance(source, (str, os.PathLike)):
        yield from _lines(Path(source))
        return
    reader = getattr(source, "records", None)
    records = reader() if callable(reader) else source
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Iterable):
        raise MeshError(
            f"mesh.merge: {name} is a {type(source).__name__}, not a log: pass a log file's path, a FileWAL, "
            "or the records read_records(path) yields"
        )
    for number, item in enumerate(records, start=1):
        if isinstance(item, Mapping):
            yield number, dict(item), ""
        else:
            yield number, None, f"a {type(item).__name__}, not a record"


def _checker() -> ChainChecker:
    # No attestation counts here: COMPACTION and REDACTION records are refused before they reach it.
    return ChainChecker(Attestations(OperatorKeys({}, "a mesh merge trusts no attestation")))


class _Device:
    """One device's chain as this input holds it: checked in the input's order, until its first break."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.checker = _checker()
        self.records: list[Record] = []
        self.broken_at: int | None = None  # index into Taken.excluded


def take(source: Any, name: str) -> Taken:
    """Read and check one input (see the module docstring); MeshError when it cannot be used at all."""
    taken = Taken(name)
    items = _items(source, name)
    first = next(items, None)
    if first is None:
        return taken
    record = first[1]
    if record is not None and record.get("type") == _MERGED and record.get("saga") == AUDIT_SAGA:
        _take_merged(taken, record, items)
    else:
        _take_device(taken, first, items)
    return taken


def _refuse_kind(name: str, number: int, r: Mapping[str, Any]) -> None:
    if "enc" in r:
        raise MeshError(
            f"{name}: line {number} holds an encrypted body: a merge re-sequences records and an encrypted "
            "body is bound to its seq; merge device logs written without an encryptor"
        )
    if r.get("type") in _REWRITTEN:
        raise MeshError(
            f"{name}: line {number} is a {r['type']} record: a compacted or redacted device log no longer "
            "holds the records other copies of it hold; merge device logs before compacting or redacting "
            "them (then compact or redact the merged log)"
        )


def _take_device(taken: Taken, first: tuple[int, Record | None, str], rest: Iterator[tuple[int, Record | None, str]]) -> None:
    name = taken.source
    number, record, error = first
    if record is None:
        raise MeshError(f"{name}: line {number} is not a log record ({error}): nothing identifies the device")
    if "hash" not in record:
        raise MeshError(
            f"{name}: its first record carries no hash chain (written with chain=False): a mesh identifies "
            "a device by the hash of its first record and keys records by hash; write device logs chained"
        )
    if record.get("seq") != 1:
        raise MeshError(
            f"{name}: its first record is seq {record.get('seq')!r}, not 1: a device is identified by the hash "
            "of its first record (seq 1), which this copy lacks (its head was cut off or compacted away)"
        )
    claimed = record.get("hash")
    device = claimed if isinstance(claimed, str) and _HEX64.match(claimed) else "?"
    state = _Device(device)
    for number, record, error in (first, *rest):
        if error.startswith(TORN):
            taken.excluded.append(_torn(device, number, error, name))
            continue
        if state.broken_at is not None:
            taken.excluded[state.broken_at] = _more(taken.excluded[state.broken_at], record)
            continue
        if record is not None:
            _refuse_kind(name, number, record)
            if record.get(MESH_FIELD) is not None:
                error = "a device record carrying a mesh origin: only a merge writes one, after MESH_MERGED"
                record = None
        _feed(taken, state, number, record, error)
    taken.devices[device] = state.records


def _feed(taken: Taken, state: _Device, number: int, record: Record | None, error: str) -> None:
    checker = state.checker
    if record is not None and "hash" not in record and isinstance(record.get("seq"), int):
        error, record = "it carries no hash chain: no writer of a chained log wrote it (a line added by hand)", None
    checker.feed(number, record, error)
    if checker.broken:
        report = checker.report()
        seq = report.bad_seq if report.bad_seq is not None else (record or {}).get("seq")
        state.broken_at = len(taken.excluded)
        why = f"{report.reason}; it and everything after it on this device's chain in this input were left out"
        if report.reason.startswith("prev does not link") and state.records:
            # The record before may be the one changed (and re-hashed, which its own check cannot see):
            # only its successor's link tells, so neither is trusted.
            seq = state.records.pop()["seq"]
            why = (f"the next record's prev does not link to it ({report.reason}): it was changed and re-hashed, "
                   "or the next one was; it and everything after it on this device's chain in this input "
                   "were left out")
            taken.excluded.append(Exclusion(state.device, seq, why, taken.source, 2, (record or {}).get("seq")))
            return
        taken.excluded.append(Exclusion(state.device, seq if isinstance(seq, int) else None, why, taken.source))
        return
    assert record is not None
    state.records.append(_device_record(record))


def _more(x: Exclusion, record: Record | None = None) -> Exclusion:
    """``x`` with one more record left out after it (``record``: that one, when it was read)."""
    seq = record.get("seq") if record is not None else None
    through = seq if isinstance(seq, int) and not isinstance(seq, bool) else x.through
    return Exclusion(x.device, x.seq, x.why, x.source, x.held + 1, through)


def _torn(device: str, number: int, error: str, name: str) -> Exclusion:
    return Exclusion(device, None, f"line {number} is {error}: a writer died mid-write, so it was never "
                     "acknowledged as durable and is left out", name)


def _take_merged(taken: Taken, head: Record, rest: Iterator[tuple[int, Record | None, str]]) -> None:
    """A merged log: its own chain must verify, and each record's origin must verify on its device's chain."""
    name = taken.source
    own = _checker()
    own.feed(1, head)
    problem = own.report().reason if own.broken else ""
    body = head.get("body")
    if not problem and (not isinstance(body, dict) or body.get("format") != FORMAT):
        problem = f"its MESH_MERGED record is not in the {FORMAT!r} format"
    if problem:
        raise MeshError(f"{name}: its first record (MESH_MERGED) does not verify: {problem}")
    assert isinstance(body, dict)
    held = body.get("held")
    for entry in held if isinstance(held, list) else ():
        device, record = (entry.get("device"), entry.get("record")) if isinstance(entry, dict) else (None, None)
        if isinstance(device, str) and isinstance(record, dict) and not check_record(record):
            taken.held.append((device, _device_record(record)))
        else:
            taken.excluded.append(Exclusion(
                str(device), record.get("seq") if isinstance(record, dict) else None,
                "a held-out record in MESH_MERGED does not add up on its own; it was dropped", name,
            ))
    devices: dict[str, _Device] = {}
    merged_break: Exclusion | None = None
    for number, record, error in rest:
        if error.startswith(TORN):
            taken.excluded.append(_torn("?", number, error, name))
            continue
        if merged_break is not None:
            merged_break = _more(merged_break)  # records of several devices: no one range of seqs
            continue
        if record is not None:
            _refuse_kind(name, number, record)
        origin = origin_of(record) if record is not None else None
        if record is not None and origin is None:
            raise MeshError(
                f"{name}: line {number} (seq {record.get('seq')!r}, {record.get('type')!r}) carries no mesh "
                "origin: it was written to the merged log after the merge (say by the recovery daemon). A merged "
                "log is an input to a merge only as the merge wrote it: merge the device logs instead"
            )
        own.feed(number, record, error)
        if own.broken:
            report = own.report()
            merged_break = Exclusion(
                origin[0] if origin else "?", origin[1].get("seq") if origin else None,
                f"the merged log's own chain breaks at its seq {report.bad_seq}: {report.reason}; nothing "
                "from there on was taken from it", name,
            )
            continue
        assert origin is not None
        device, device_record = origin
        state = devices.get(device)
        if state is None:
            state = devices[device] = _Device(device)
        if state.broken_at is not None:
            taken.excluded[state.broken_at] = _more(taken.excluded[state.broken_at], device_record)
            continue
        _feed(taken, state, number, device_record, "")
    if merged_break is not None:
        taken.excluded.append(merged_break)
    for device, state in devices.items():
        # A device's merged records must start at its own first record, like a device log does.
        if state.records and device != state.records[0].get("hash"):
            taken.excluded.append(Exclusion(
                device, 1, "the mesh origin names a device that is not the hash of this chain's first record; "
                f"its {len(state.records)} record(s) were left out", name, len(state.records),
            ))
            continue
        taken.devices[device] = state.records
