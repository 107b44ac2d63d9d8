"""The two legitimate rewrites of a log: redaction (erasure) and compaction.

Both keep the chain verifiable. Redaction removes a record's ``body`` and
``salt`` (or ``enc``) and leaves its header, which is all the chain hashes; a
chained REDACTION record says which sequences were erased, by whom and why.
Compaction drops whole records and appends a chained COMPACTION record naming
each removed range of sequences, the hash of the last record in each range (the
``prev`` of whatever follows the gap), a digest of every removed hash, and each
saga it removed with that saga's terminal record (only settled sagas go).
Attestations and REDACTION records are never compacted away, and never encrypted
(the verifier must read them without a key).

Both change what the log means, so both are signed by an operator key the agent
does not hold (``signer=``, see ``log.attestation``); a reader treats an unsigned
or untrusted attestation as a break.

Concurrency. The rewrite holds the same exclusive ``flock`` FileWAL takes for each
flush, so no batch is written while the file is read, rewritten and swapped in
(temp file, fsync, ``os.replace``, directory fsync). A FileWAL in any process
checks, under that lock, whether the file it holds open still has a name (its
link count); once a rewrite replaced it, it reopens the path and continues the
sequence and chain from the new file's last record. Nothing appended
concurrently is lost. (A log file with extra hard links is not supported: the old
inode would keep a name, and a writer would not notice the swap.)

A rewrite refuses a log whose chain is broken: rewriting damaged evidence would
launder it. Export it with ``allow_broken=True`` first, then investigate.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError, WALError
from agent_saga.log.attestation import OperatorKey, OperatorKeys, operator_keys_path
from agent_saga.log.chain import Attestations, ChainChecker, read_line
from agent_saga.log.codec import BodyCipher, canonical, seal
from agent_saga.log.file import _set_aside_torn_tail
from agent_saga.log.fs import fsync_dir, write_new
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import AUDIT_SAGA, GENESIS, Record, RecordType

__all__ = [
    "AUDIT_TYPES",
    "CompactionResult",
    "LogMaintenanceError",
    "RedactionResult",
    "compact",
    "locked_log",
    "operator_signer",
    "plan_compaction",
    "plan_redaction",
    "redact_record",
    "redact_where",
    "redaction_body",
    "removed_ranges",
    "settled_sagas",
]

#: Record types that maintenance never removes or erases.
AUDIT_TYPES = frozenset({RecordType.COMPACTION.value, RecordType.REDACTION.value})
_ERASED = ("body", "salt", "enc")


class LogMaintenanceError(WALError):
    """A redaction or compaction was refused; nothing was changed."""


@dataclass(frozen=True, slots=True)
class RedactionResult:
    """What a redaction erased. ``seqs`` is empty when there was nothing (new) to erase."""

    seqs: tuple[int, ...]
    record_seq: int | None  # the REDACTION record appended, if any


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction removed, and the attestation it wrote."""

    removed: int
    kept: int
    ranges: tuple[tuple[int, int], ...]
    attestation_seq: int | None
    bytes_before: int
    bytes_after: int


@contextmanager
def locked_log(path: Path, exclusive: bool = True) -> Iterator[int]:
    """An open descriptor of the file now at ``path``, holding the writers' flock.

    Loops if another rewrite replaced the file while we waited for the lock.
    """
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    flags = os.O_RDWR if exclusive else os.O_RDONLY
    fd = os.open(path, flags)
    try:
        while True:
            fcntl.flock(fd, mode)
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            fd = -1
            fd = os.open(path, flags)
        yield fd
    finally:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@dataclass(slots=True)
class _Line:
    raw: bytes
    record: Record


class _Log:
    """A locked log's lines up to its last record, already verified."""

    def __init__(self, fd: int, path: Path, action: str) -> None:
        size = os.fstat(fd).st_size
        with os.fdopen(os.dup(fd), "rb") as fh:
            lines = list(iter_lines(fh, 0, size))
        if lines and not lines[-1].terminated and is_torn(lines[-1].raw):
            _set_aside_torn_tail(fd, path, lines[-1].offset, size)
            size = lines.pop().offset
        self.size = size
        self.lines: list[_Line] = []
        checker = ChainChecker(Attestations.scan(lines))
        for line in lines:
            if not line.raw.strip():
                continue
            record, error = read_line(line)
            if record is None:
                raise LogMaintenanceError(
                    f"{path}: refusing to {action}: line {line.number} is not a record ({error})"
                )
            checker.feed(line.number, record)
            self.lines.append(_Line(line.raw, record))
        self.report = checker.report()
        if self.report.status == "broken":
            raise LogMaintenanceError(
                f"{path}: refusing to {action}: the chain is {self.report.label}. Rewriting a damaged "
                "log would launder the damage; keep a copy (agent-saga export --allow-broken) and "
                "investigate first"
            )
        # The record appended (attestation, REDACTION) continues the chain if the log's
        # last record is chained, as the next FileWAL flush would.
        last = self.lines[-1].record if self.lines else {}
        self.chained = "hash" in last or not self.lines
        self.last_seq = self.report.last_seq or 0
        self.head = str(last.get("hash", GENESIS))


def _seal_audit(log: _Log, rtype: RecordType, body: dict[str, Any], signer: OperatorKey) -> tuple[bytes, int]:
    seq = log.last_seq + 1
    signed = signer.sign(rtype.value, seq, log.head if log.chained else None, body)
    data, _, _ = seal([(seq, time.time_ns() // 1000, rtype.value, AUDIT_SAGA, None, signed)], log.head, log.chained)
    return data, seq


def operator_signer(signer: object) -> OperatorKey:
    """``signer`` as an operator key the host trusts; ConfigurationError (one line) otherwise.

    An attestation signed by a key the host does not trust would be a break the
    moment it is written, so it is refused before anything changes.
    """
    key = OperatorKey.of(signer)
    trusted = OperatorKeys.load()
    if trusted.error or key.key_id not in trusted.keys:
        raise ConfigurationError(
            f"the operator key {key.key_id} is not trusted on this host ({trusted.error or operator_keys_path()}): "
            f"its attestation would read as a break. As root: agent-saga approvals trust '{key.public}' "
            f"--trusted-keys {operator_keys_path()}"
        )
    return key


def _replace(fd: int, path: Path, lines: Iterable[bytes], tail: bytes) -> int:
    """Write the new content beside ``path`` (same mode), make it durable, swap it in. Returns its size."""
    tmp = path.with_name(f".{path.name}.rewrite-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # left by a rewrite of ours that died
    size = write_new(tmp, [*(line + b"\n" for line in lines), tail], os.fstat(fd).st_mode & 0o777)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return size


def _check_who(by: str, reason: str) -> None:
    for name, value in (("by", by), ("reason", reason)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name}= must say {'who' if name == 'by' else 'why'} (a non-empty string), got {value!r}")


def _readable(record: Record, encryptor: BodyCipher | None) -> Record:
    """The record with its body decrypted when a key is at hand; as stored otherwise."""
    if "enc" not in record or (encryptor is None and not os.environ.get("AGENT_SAGA_WAL_KEY")):
        return record
    from agent_saga.log.crypto import open_record

    return open_record(record, encryptor)


def redact_record(
    path: str | os.PathLike[str], seq: int, *, by: str, reason: str, signer: str | os.PathLike[str] | OperatorKey | None = None,
) -> RedactionResult:
    """Erase the body and salt of the record numbered ``seq`` (GDPR erasure).

    Idempotent: an already redacted record is left as it is. Refuses COMPACTION and
    REDACTION records (the verifier needs their bodies) and unknown sequences.
    ``signer`` is the operator's key (its file's path) that signs the REDACTION
    record; without one, or with one the host does not trust, nothing is changed.
    """
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"seq must be a record's sequence number (int), got {seq!r}")
    return _redact(Path(path), None, by, reason, None, exact=seq, signer=signer)


def redact_where(
    path: str | os.PathLike[str],
    predicate: Callable[[Record], bool],
    *,
    by: str,
    reason: str,
    encryptor: BodyCipher | None = None,
    signer: str | os.PathLike[str] | OperatorKey | None = None,
) -> RedactionResult:
    """Erase the body and salt of every record for which ``predicate(record)`` is true.

    The predicate sees each record as ``read_records`` would return it (decrypted
    with ``encryptor`` or ``$AGENT_SAGA_WAL_KEY`` when the log is encrypted). COMPACTION
    and REDACTION records are never erased. ``signer`` as for :func:`redact_record`.
    """
    if not callable(predicate):
        raise TypeError(f"predicate must be a callable (record) -> bool, got {predicate!r}")
    return _redact(Path(path), predicate, by, reason, encryptor, exact=None, signer=signer)


def _redact(
    path: Path,
    predicate: Callable[[Record], bool] | None,
    by: str,
    reason: str,
    encryptor: BodyCipher | None,
    exact: int | None,
    signer: object,
) -> RedactionResult:
    _check_who(by, reason)
    key = operator_signer(signer)
    path = path.absolute()
    with locked_log(path) as fd:
        log = _Log(fd, path, "redact")
        erased = plan_redaction(
            [line.record for line in log.lines], str(path), by, reason, predicate, encryptor, exact
        )
        if not erased:
            return RedactionResult((), None)
        new_lines = [
            canonical(erased[line.record["seq"]]).encode() if line.record["seq"] in erased else line.raw
            for line in log.lines
        ]
        tail, record_seq = _seal_audit(log, RecordType.REDACTION, redaction_body(erased, by, reason), key)
        _replace(fd, path, new_lines, tail)
    return RedactionResult(tuple(erased), record_seq)


def plan_redaction(
    records: list[Record],
    where: str,
    by: str,
    reason: str,
    predicate: Callable[[Record], bool] | None,
    encryptor: BodyCipher | None,
    exact: int | None,
) -> dict[int, Record]:
    """What a redaction turns each erased record into, keyed by seq, oldest first.

    Backend-neutral: the file log and the server logs (``log.rewrite``) share it.
    ``exact`` names one seq (then ``predicate`` is None); an already erased record
    is left out; an audit record or an unknown seq is refused.
    """
    now = time.time_ns() // 1000
    erased: dict[int, Record] = {}
    found = False
    for record in records:
        is_target = (
            record["seq"] == exact if predicate is None
            else record.get("type") not in AUDIT_TYPES and bool(predicate(_readable(record, encryptor)))
        )
        if not is_target:
            continue
        found = True
        if record.get("type") in AUDIT_TYPES:
            raise LogMaintenanceError(
                f"{where}: seq {record['seq']} is a {record['type']} record; the verifier needs its "
                "body to account for other records, and it holds no saga data"
            )
        if not any(k in record for k in _ERASED):
            continue  # already erased
        kept = {k: v for k, v in record.items() if k not in _ERASED}
        kept["redacted"] = {"by": by, "reason": reason, "at": now}
        erased[int(record["seq"])] = kept
    if exact is not None and not found:
        last = records[-1]["seq"] if records else 0
        raise LogMaintenanceError(
            f"{where}: no record has seq {exact} (it ends at seq {last}); list the log's "
            "records with agent_saga.log.read_records to find the one to erase"
        )
    return erased


def redaction_body(erased: Mapping[int, Record], by: str, reason: str) -> dict[str, Any]:
    """The body of the REDACTION record that attests ``erased``."""
    return {"seqs": list(erased), "by": by, "reason": reason}


def settled_sagas(records: Iterable[Record]) -> set[str]:
    """Sagas that are over and left nothing to repair: completed, or rolled back cleanly."""
    settled: set[str] = set()
    for r in records:
        t = r.get("type")
        if t == RecordType.SAGA_COMPLETED.value:
            settled.add(r["saga"])
        elif t == RecordType.SAGA_ROLLED_BACK.value:
            body = r.get("body")
            if isinstance(body, dict) and body.get("clean") is True:
                settled.add(r["saga"])
    settled.discard(AUDIT_SAGA)
    return settled


def compact(
    path: str | os.PathLike[str],
    keep: Callable[[Record], bool] | None = None,
    *,
    by: str = "agent-saga compact",
    reason: str = "settled sagas",
    encryptor: BodyCipher | None = None,
    signer: str | os.PathLike[str] | OperatorKey | None = None,
) -> CompactionResult:
    """Remove records no longer needed and attest what was removed.

    By default every record of a settled saga goes (SAGA_COMPLETED, or
    SAGA_ROLLED_BACK with ``clean: true``); an open, crashed or unclean saga is kept
    whole. ``keep(record) -> bool`` narrows that rule (True keeps the record): it may
    keep more, and it is refused (nothing changes) if it would remove a record of a
    saga that is not settled, or a settled saga's terminal record without the rest.
    COMPACTION and REDACTION records are always kept. When nothing is removed the
    file is not touched. ``signer`` is the operator's key (its file's path) that
    signs the COMPACTION record; without one, or with one the host does not trust,
    nothing is changed.
    """
    _check_who(by, reason)
    key = operator_signer(signer)
    p = Path(path).absolute()
    with locked_log(p) as fd:
        log = _Log(fd, p, "compact")
        removed, body = plan_compaction(
            [line.record for line in log.lines], keep, by, reason, encryptor, str(p)
        )
        if not removed:
            return CompactionResult(0, len(log.lines), (), None, log.size, log.size)
        gone = {r["seq"] for r in removed}
        new_lines = [line.raw for line in log.lines if line.record["seq"] not in gone]
        tail, attestation_seq = _seal_audit(log, RecordType.COMPACTION, body, key)
        size = _replace(fd, p, new_lines, tail)
    return CompactionResult(
        len(removed), len(new_lines) + 1, removed_ranges(removed), attestation_seq, log.size, size,
    )


def plan_compaction(
    records: list[Record],
    keep: Callable[[Record], bool] | None,
    by: str,
    reason: str,
    encryptor: BodyCipher | None,
    where: str = "log",
) -> tuple[list[Record], dict[str, Any]]:
    """Which records a compaction removes, and the body of the COMPACTION record attesting it.

    Backend-neutral (see :func:`plan_redaction`). Audit records are always kept. Only
    settled sagas are removed, each with its terminal record, which the body names
    (as stored: the verifier checks its hash, its type and, if rolled back, that it was
    clean); a ``keep`` that would remove anything else is refused (LogMaintenanceError).
    """
    views = [_readable(record, encryptor) for record in records]
    terminals = _terminals(records, views)
    keep_rule: Callable[[Record], bool]
    if keep is None:
        def keep_rule(record: Record) -> bool:
            return record.get("saga") not in terminals

        rule = "settled sagas (SAGA_COMPLETED, or SAGA_ROLLED_BACK with clean=true)"
    else:
        keep_rule, rule = keep, "a caller-supplied keep predicate, within settled sagas"
    removed = [
        record for record, view in zip(records, views, strict=True)
        if record.get("type") not in AUDIT_TYPES and not keep_rule(view)
    ]
    counts: dict[str, int] = {}
    for record in removed:
        saga = record.get("saga")
        if saga not in terminals:
            raise LogMaintenanceError(
                f"{where}: refusing to compact: keep would remove seq {record['seq']} of saga {saga!r}, which is "
                "not settled (no SAGA_COMPLETED or clean SAGA_ROLLED_BACK); removing it could hide an effect "
                "that still needs an undo"
            )
        counts[saga] = counts.get(saga, 0) + 1
    gone = {r["seq"] for r in removed}
    for saga in counts:
        if terminals[saga]["seq"] not in gone:
            raise LogMaintenanceError(
                f"{where}: refusing to compact: keep would remove records of saga {saga!r} but keep its terminal "
                f"record seq {terminals[saga]['seq']}; a compaction removes a saga's terminal record with the rest"
            )
    body = {
        "removed": [
            {
                "first": run[0]["seq"], "last": run[-1]["seq"], "count": len(run),
                "last_hash": run[-1].get("hash"),
                "hashes_sha256": hashlib.sha256(
                    "\n".join(str(r.get("hash")) for r in run).encode()
                ).hexdigest(),
            }
            for run in _runs(removed)
        ],
        "records": len(removed),
        "sagas": [
            {"saga": saga, "records": counts[saga], "terminal": terminals[saga]}
            for saga in sorted(counts, key=lambda s: terminals[s]["seq"])
        ],
        "by": by,
        "reason": reason,
        "rule": rule,
    }
    return removed, body


def _terminals(records: list[Record], views: list[Record]) -> dict[str, Record]:
    """Each settled saga's terminal record, as stored (``views``: the same records, readable)."""
    settled: dict[str, Record] = {}
    for record, view in zip(records, views, strict=True):
        if view.get("saga") in settled_sagas([view]):
            settled[view["saga"]] = record
    return settled


def removed_ranges(removed: list[Record]) -> tuple[tuple[int, int], ...]:
    """The runs of consecutive sequences in ``removed``, as (first, last)."""
    return tuple((run[0]["seq"], run[-1]["seq"]) for run in _runs(removed))


def _runs(records: list[Record]) -> list[list[Record]]:
    """Group removed records into runs of consecutive sequence numbers."""
    runs: list[list[Record]] = []
    for r in records:
        if runs and r["seq"] == runs[-1][-1]["seq"] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs
