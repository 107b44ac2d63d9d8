"""Redaction and compaction of a log that lives on a server.

The rules are the file log's (``log.maintenance``: what is erased, what is
removed, what the attestation says); only the storage differs. A backend runs
:meth:`ServerLog._rewrite` with the log's writers held off (Postgres: the head
row locked for the transaction; Redis: an optimistic transaction that retries if
a writer got in first), hands the planner every stored line, and applies the
change the planner returns atomically.
"""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_saga.log.attestation import OperatorKey
from agent_saga.log.chain import verify_records
from agent_saga.log.codec import BodyCipher, canonical, decode_line, seal
from agent_saga.log.maintenance import (
    CompactionResult,
    LogMaintenanceError,
    RedactionResult,
    _check_who,
    operator_signer,
    plan_compaction,
    plan_redaction,
    redaction_body,
    removed_ranges,
)
from agent_saga.log.records import AUDIT_SAGA, Record, RecordType

__all__ = ["Change", "ServerLog", "Stored"]


@dataclass(frozen=True, slots=True)
class Stored:
    """Every line of a locked log, oldest first, and its head."""

    lines: list[tuple[int, str]]  # (seq, the stored line)
    head_seq: int
    head_hash: str


@dataclass(slots=True)
class Change:
    """What a rewrite does: lines replaced (by seq), sequences removed, one record appended."""

    replaced: dict[int, str] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)
    appended: tuple[int, str, str] | None = None  # seq, line, its hash (the new head)


class ServerLog(abc.ABC):
    """Redaction and compaction for a log whose backend implements :meth:`_rewrite`."""

    location: str
    encryptor: BodyCipher | None

    @abc.abstractmethod
    def _rewrite(self, plan: Callable[[Stored], Change | None]) -> None:
        """Hold off writers, read every stored line, apply ``plan``'s change (None: nothing) atomically."""

    def redact_record(
        self, seq: int, *, by: str, reason: str, signer: str | os.PathLike[str] | OperatorKey | None = None
    ) -> RedactionResult:
        """Erase the body and salt of the record numbered ``seq`` (see ``log.maintenance.redact_record``)."""
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"seq must be a record's sequence number (int), got {seq!r}")
        return self._redact(None, by, reason, None, seq, signer)

    def redact_where(
        self,
        predicate: Callable[[Record], bool],
        *,
        by: str,
        reason: str,
        encryptor: BodyCipher | None = None,
        signer: str | os.PathLike[str] | OperatorKey | None = None,
    ) -> RedactionResult:
        """Erase the body and salt of every record ``predicate`` selects (see ``log.maintenance.redact_where``)."""
        if not callable(predicate):
            raise TypeError(f"predicate must be a callable (record) -> bool, got {predicate!r}")
        return self._redact(predicate, by, reason, encryptor or self.encryptor, None, signer)

    def _redact(
        self,
        predicate: Callable[[Record], bool] | None,
        by: str,
        reason: str,
        encryptor: BodyCipher | None,
        exact: int | None,
        signer: object,
    ) -> RedactionResult:
        _check_who(by, reason)
        key = operator_signer(signer)
        result = RedactionResult((), None)

        def plan(stored: Stored) -> Change | None:
            nonlocal result
            records = _verified(stored, self.location, "redact")
            erased = plan_redaction(records, self.location, by, reason, predicate, encryptor, exact)
            if not erased:
                result = RedactionResult((), None)
                return None
            change = Change(replaced={seq: canonical(record) for seq, record in erased.items()})
            change.appended = _attestation(
                stored, records, RecordType.REDACTION, redaction_body(erased, by, reason), key
            )
            result = RedactionResult(tuple(erased), change.appended[0])
            return change

        self._rewrite(plan)
        return result

    def compact(
        self,
        keep: Callable[[Record], bool] | None = None,
        *,
        by: str = "agent-saga compact",
        reason: str = "settled sagas",
        encryptor: BodyCipher | None = None,
        signer: str | os.PathLike[str] | OperatorKey | None = None,
    ) -> CompactionResult:
        """Remove records no longer needed and attest what was removed (see ``log.maintenance.compact``)."""
        _check_who(by, reason)
        key = operator_signer(signer)
        result: CompactionResult | None = None

        def plan(stored: Stored) -> Change | None:
            nonlocal result
            records = _verified(stored, self.location, "compact")
            size = sum(len(line) + 1 for _, line in stored.lines)
            removed, body = plan_compaction(
                records, keep, by, reason, encryptor or self.encryptor, self.location
            )
            if not removed:
                result = CompactionResult(0, len(records), (), None, size, size)
                return None
            change = Change(removed=[r["seq"] for r in removed])
            change.appended = _attestation(stored, records, RecordType.COMPACTION, body, key)
            gone = set(change.removed)
            after = sum(len(line) + 1 for seq, line in stored.lines if seq not in gone)
            result = CompactionResult(
                len(removed), len(records) - len(removed) + 1, removed_ranges(removed),
                change.appended[0], size, after + len(change.appended[1]) + 1,
            )
            return change

        self._rewrite(plan)
        assert result is not None
        return result


def _verified(stored: Stored, where: str, action: str) -> list[Record]:
    """The stored records, refusing (LogMaintenanceError) a log whose chain is broken."""
    records: list[Record] = []
    for seq, line in stored.lines:
        try:
            records.append(decode_line(line))
        except ValueError as err:
            raise LogMaintenanceError(f"{where}: refusing to {action}: seq {seq} is not a record ({err})") from None
    report = verify_records(records)
    if report.status == "broken":
        raise LogMaintenanceError(
            f"{where}: refusing to {action}: the chain is {report.label}. Rewriting a damaged log would "
            "launder the damage; keep a copy (agent-saga export --allow-broken) and investigate first"
        )
    return records


def _attestation(
    stored: Stored, records: list[Record], rtype: RecordType, body: dict[str, Any], signer: OperatorKey
) -> tuple[int, str, str]:
    """The audit record continuing the chain from the head, signed by ``signer``: (seq, line, hash).

    Chained if the log's last record is (as the next writer's record would be).
    """
    seq = stored.head_seq + 1
    chained = not records or "hash" in records[-1]
    signed = signer.sign(rtype.value, seq, stored.head_hash if chained else None, body)
    entry = (seq, time.time_ns() // 1000, rtype.value, AUDIT_SAGA, None, signed)
    data, head, _ = seal([entry], stored.head_hash, chained)
    return seq, data.decode().rstrip("\n"), head
