"""Redaction and compaction of a log file: the file's side of ``log.rewrite``.

What a rewrite erases, removes and attests is planned once for every backend
(``log.rewrite``, which also says what REDACTION and COMPACTION records hold and
who signs them). Here is only how a file applies the plan: under the writers'
lock, a new file written beside the old one and swapped in.

Concurrency. The rewrite holds the same exclusive ``flock`` FileWAL takes for each
flush, so no batch is written while the file is read, rewritten and swapped in
(temp file, fsync, ``os.replace``, directory fsync). A FileWAL in any process
checks, under that lock, whether the file it holds open still has a name (its
link count); once a rewrite replaced it, it reopens the path and continues the
sequence and chain from the new file's last record. Nothing appended
concurrently is lost. (A log file with extra hard links is not supported: the old
inode would keep a name, and a writer would break at its next flush, its file no longer
the one at the path.)

A rewrite refuses a log whose chain is broken: rewriting damaged evidence would
launder it. Export it with ``allow_broken=True`` first, then investigate.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_saga.log.attestation import OperatorKey
from agent_saga.log.chain import Attestations, ChainChecker, read_line
from agent_saga.log.codec import BodyCipher
from agent_saga.log.file import _set_aside_torn_tail
from agent_saga.log.fs import fsync_dir, write_new
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import GENESIS, Record, RecordType
from agent_saga.log.rewrite import (
    AUDIT_TYPES,
    Change,
    CompactionResult,
    LogMaintenanceError,
    RedactionResult,
    Rewritable,
    Stored,
    _attestation,
    operator_signer,
    plan_compaction,
    plan_redaction,
    redaction_body,
    removed_ranges,
    settled_sagas,
)

__all__ = [
    "AUDIT_TYPES",
    "CompactionResult",
    "LogMaintenanceError",
    "RedactionResult",
    "append_signed",
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


def _read(fd: int, path: Path, action: str) -> Stored:
    """A locked log's lines up to its last record, verified (a torn tail is set aside first)."""
    size = os.fstat(fd).st_size
    with os.fdopen(os.dup(fd), "rb") as fh:
        lines = list(iter_lines(fh, 0, size))
    if lines and not lines[-1].terminated and is_torn(lines[-1].raw):
        _set_aside_torn_tail(fd, path, lines[-1].offset, size)
        size = lines.pop().offset
    stored: list[tuple[int, str]] = []
    records: list[Record] = []
    checker = ChainChecker(Attestations.scan(lines))
    for line in lines:
        if not line.raw.strip():
            continue
        record, error = read_line(line)
        if record is None:
            raise LogMaintenanceError(f"{path}: refusing to {action}: line {line.number} is not a record ({error})")
        checker.feed(line.number, record)
        stored.append((record["seq"], line.raw.decode()))
        records.append(record)
    report = checker.report()
    if report.status == "broken":
        raise LogMaintenanceError(
            f"{path}: refusing to {action}: the chain is {report.label}. Rewriting a damaged "
            "log would launder the damage; keep a copy (agent-saga export --allow-broken) and "
            "investigate first"
        )
    head = str(records[-1].get("hash", GENESIS)) if records else GENESIS
    return Stored(stored, report.last_seq or 0, head, records=records, size=size)


class _LogFile(Rewritable):
    """A log file as the rewrite core sees it: the apply is a new file swapped in under the lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()
        self.location = str(self.path)
        self.encryptor = None  # the plan's readers fall back to $AGENT_SAGA_WAL_KEY

    def _rewrite(self, plan: Callable[[Stored], Change | None], action: str = "rewrite") -> None:
        with locked_log(self.path) as fd:
            stored = _read(fd, self.path, action)
            change = plan(stored)
            if change is None:
                return  # nothing to do: the file is not touched
            gone = set(change.removed)
            lines = [
                change.replaced.get(seq, line).encode()
                for seq, line in stored.lines if seq not in gone
            ]
            tail = b"" if change.appended is None else (change.appended[1] + "\n").encode()
            _replace(fd, self.path, lines, tail)


def _replace(fd: int, path: Path, lines: Iterable[bytes], tail: bytes) -> int:
    """Write the new content beside ``path`` (same mode), make it durable, swap it in. Returns its size."""
    tmp = path.with_name(f".{path.name}.rewrite-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # left by a rewrite of ours that died
    size = write_new(tmp, [*(line + b"\n" for line in lines), tail], os.fstat(fd).st_mode & 0o777)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return size


def redact_record(
    path: str | os.PathLike[str], seq: int, *, by: str, reason: str, signer: str | os.PathLike[str] | OperatorKey | None = None,
) -> RedactionResult:
    """Erase the body and salt of the record numbered ``seq`` (GDPR erasure).

    Idempotent: an already redacted record is left as it is. Refuses COMPACTION and
    REDACTION records (the verifier needs their bodies) and unknown sequences.
    ``signer`` is the operator's key (its file's path) that signs the REDACTION
    record; without one, or with one the host does not trust, nothing is changed.
    """
    return _LogFile(path).redact_record(seq, by=by, reason=reason, signer=signer)  # Rewritable checks seq


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
    # Rewritable.redact_where checks the predicate, for this face and every backend's alike.
    return _LogFile(path).redact_where(predicate, by=by, reason=reason, encryptor=encryptor, signer=signer)


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
    return _LogFile(path).compact(keep, by=by, reason=reason, encryptor=encryptor, signer=signer)


def append_signed(
    path: str | os.PathLike[str], rtype: RecordType, body: dict[str, Any], signer: OperatorKey,
) -> tuple[int, str]:
    """Append one record of ``rtype``, signed by ``signer`` at the place it lands, under the writers' lock.

    The signature covers the record's seq and the ``prev`` it continues from (``log.attestation``),
    which only the lock fixes: a flush by a live FileWAL in between would move both. Refused, like
    every rewrite, on a log whose chain is broken (a key must not vouch for damage). Returns the
    new record's (seq, hash).
    """
    landed: list[tuple[int, str]] = []

    def plan(stored: Stored) -> Change:
        seq, line, head = _attestation(stored, stored.records or [], rtype, body, signer)
        landed.append((seq, head))
        return Change(appended=(seq, line, head))

    _LogFile(path)._rewrite(plan, f"sign a {rtype.value}")
    return landed[0]
