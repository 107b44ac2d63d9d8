"""The rewrites of a log, planned once for every backend: redaction and compaction.

Both keep the chain verifiable. Redaction removes a record's ``body`` and
``salt`` (or ``enc``) and leaves its header, which is all the chain hashes; a
chained REDACTION record says which sequences were erased, by whom and why.
Compaction drops whole records and appends a chained COMPACTION record naming
each removed range of sequences, the hash of the last record in each range (the
``prev`` of whatever follows the gap), a digest of every removed hash, and each
saga it removed with that saga's terminal record (only settled sagas go).
Attestations and REDACTION records are never compacted away, and never encrypted
(the verifier must read them without a key). Both are signed by an operator key
the agent does not hold (``signer=``, see ``log.attestation``).

A rewrite is a plan and an apply. The plan (here, the same for every backend)
reads the locked log's records, refuses a broken chain (rewriting damaged
evidence would launder it), decides what is erased, removed and attested, and
returns a :class:`Change`. The apply is the backend's :meth:`Rewritable._rewrite`:
hold the log's writers off, hand the plan every stored line, and swap the change
in atomically (the file: a new file under the writers' ``flock``, see
``log.maintenance``; Postgres: one transaction holding the head row; Redis: an
optimistic transaction that plans again if a writer got in first).
"""

from __future__ import annotations

import abc
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.errors import ConfigurationError, WALError
from agent_saga.log.attestation import OperatorKey, OperatorKeys, operator_keys_path
from agent_saga.log.chain import verify_records
from agent_saga.log.codec import BodyCipher, canonical, decode_line, seal
from agent_saga.log.parts import part_of
from agent_saga.log.records import AUDIT_SAGA, Record, RecordType

__all__ = [
    "AUDIT_TYPES",
    "Change",
    "CompactionResult",
    "LogMaintenanceError",
    "RedactionResult",
    "Rewritable",
    "Stored",
    "check_who",
    "operator_signer",
    "plan_compaction",
    "plan_redaction",
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


@dataclass(frozen=True, slots=True)
class Stored:
    """Every line of a locked log, oldest first, and its head: what a plan reads.

    ``records``: the lines already decoded and verified, when the backend reads them
    that way anyway (the file, whose errors name line numbers); None: the plan does.
    ``size``: the bytes the log takes (default: its lines, one newline each).
    """

    lines: list[tuple[int, str]]  # (seq, the stored line)
    head_seq: int
    head_hash: str
    records: list[Record] | None = None
    size: int | None = None


@dataclass(slots=True)
class Change:
    """What a rewrite does: lines replaced (by seq), sequences removed, one record appended."""

    replaced: dict[int, str] = field(default_factory=dict)
    removed: list[int] = field(default_factory=list)
    appended: tuple[int, str, str] | None = None  # seq, line, its hash (the new head)


class Rewritable(abc.ABC):
    """Redaction and compaction, planned here, for a backend that implements :meth:`_rewrite`."""

    location: str
    encryptor: BodyCipher | None

    @abc.abstractmethod
    def _rewrite(self, plan: Callable[[Stored], Change | None], action: str = "rewrite") -> None:
        """Hold off writers, read every stored line, apply ``plan``'s change (None: nothing) atomically.

        ``action`` ("redact", "compact") names the rewrite in a refusal the backend raises itself.
        """

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
        check_who(by, reason)
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

        self._rewrite(plan, "redact")
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
        check_who(by, reason)
        key = operator_signer(signer)
        result: CompactionResult | None = None

        def plan(stored: Stored) -> Change | None:
            nonlocal result
            records = _verified(stored, self.location, "compact")
            size = sum(_stored_bytes(line) for _, line in stored.lines) if stored.size is None else stored.size
            removed, body = plan_compaction(
                records, keep, by, reason, encryptor or self.encryptor, self.location
            )
            if not removed:
                result = CompactionResult(0, len(records), (), None, size, size)
                return None
            change = Change(removed=[r["seq"] for r in removed])
            change.appended = _attestation(stored, records, RecordType.COMPACTION, body, key)
            gone = set(change.removed)
            after = sum(_stored_bytes(line) for seq, line in stored.lines if seq not in gone)
            result = CompactionResult(
                len(removed), len(records) - len(removed) + 1, removed_ranges(removed),
                change.appended[0], size, after + _stored_bytes(change.appended[1]),
            )
            return change

        self._rewrite(plan, "compact")
        assert result is not None
        return result


def _stored_bytes(line: str) -> int:
    """The bytes one stored line takes, with its newline (a log's size is counted in bytes)."""
    return len(line) + 1 if line.isascii() else len(line.encode()) + 1


def _verified(stored: Stored, where: str, action: str) -> list[Record]:
    """The stored records, refusing (LogMaintenanceError) a log whose chain is broken."""
    if stored.records is not None:
        return stored.records  # the backend read and verified them
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


def operator_signer(signer: object, what: str = "a compaction or redaction") -> OperatorKey:
    """``signer`` as an operator key the host trusts; ConfigurationError (one line) otherwise.

    An attestation signed by a key the host does not trust would be a break (or, on a
    saga, only a claim) the moment it is written, so it is refused before anything changes.
    """
    key = OperatorKey.of(signer, what)
    trusted = OperatorKeys.load()
    if trusted.error or key.key_id not in trusted.keys:
        raise ConfigurationError(
            f"the operator key {key.key_id} is not trusted on this host ({trusted.error or operator_keys_path()}): "
            f"its attestation would read as a break. As root: agent-saga approvals trust '{key.public}' "
            f"--trusted-keys {operator_keys_path()}"
        )
    return key


def check_who(by: str, reason: str) -> None:
    """ValueError unless ``by`` and ``reason`` say who rewrites the log and why."""
    for name, value in (("by", by), ("reason", reason)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name}= must say {'who' if name == 'by' else 'why'} (a non-empty string), got {value!r}")


def _readable(record: Record, encryptor: BodyCipher | None) -> Record:
    """The record with its body decrypted when a key is at hand; as stored otherwise."""
    if "enc" not in record or (encryptor is None and not os.environ.get("AGENT_SAGA_WAL_KEY")):
        return record
    from agent_saga.log.crypto import open_record

    return open_record(record, encryptor)


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
    """Sagas that are over and left nothing to repair: completed, or rolled back cleanly.

    A saga several devices wrote to (a merged mesh log, ``agent_saga.log.parts``) is settled
    only when every device's part is, or when the merged log's own writer settled it: one
    device's completed part says nothing about another's open step.
    """
    settled: set[str] = set()
    parts: dict[str, dict[str, str | None]] = {}
    for r in records:
        t = r.get("type")
        part = part_of(r)
        if part:
            parts.setdefault(r["saga"], {}).setdefault(part, None)
        if t == RecordType.SAGA_COMPLETED.value:
            settled.add(r["saga"])
        elif t == RecordType.SAGA_ROLLED_BACK.value:
            body = r.get("body")
            if isinstance(body, dict) and body.get("clean") is True:
                settled.add(r["saga"])
            else:
                t = "unsettled"
        else:
            continue
        if r["saga"] in parts:
            parts[r["saga"]][part] = t
    for saga, ends in parts.items():
        final = (ends[""],) if "" in ends else tuple(ends.values())
        if any(end is None or end == "unsettled" for end in final):
            settled.discard(saga)
    settled.discard(AUDIT_SAGA)
    return settled


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
    whole = settled_sagas(views)  # a saga several devices wrote to is settled as a whole, or not at all
    for record, view in zip(records, views, strict=True):
        if view.get("saga") in whole and view.get("saga") in settled_sagas([view]):
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
