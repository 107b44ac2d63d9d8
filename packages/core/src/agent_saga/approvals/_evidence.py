"""What the approval workflow writes to the hash-chained log, and when it already did.

Every record goes under the saga and step that asked, so "who let this step
run" is answered by the step's own records. A store entry remembers which
records each log already holds (``logged``: ``"<event>@<log location>"``), so a
restarted process, or an approver's CLI writing to the same log, never writes
one twice; a crash between writing and remembering costs a duplicate record,
never a missing one.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_saga.approvals._entry import ApprovalEntry, Status
from agent_saga.log.base import WAL
from agent_saga.log.records import RecordType

__all__ = [
    "Remembered",
    "decision_body",
    "decision_type",
    "escalation_body",
    "iso",
    "log_key",
    "mark_logged",
    "remembered",
    "request_body",
]

_DECISION_TYPES = {
    Status.GRANTED: RecordType.APPROVAL_GRANTED,
    Status.DENIED: RecordType.APPROVAL_DENIED,
    Status.EXPIRED: RecordType.APPROVAL_EXPIRED,
    Status.BREAK_GLASS: RecordType.APPROVAL_BREAK_GLASS,
}


def iso(ts: float) -> str:
    """UTC, to the microsecond: the time a person reads in an audit."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def log_key(event: str, wal: WAL) -> str:
    return f"{event}@{wal.location}"


def mark_logged(key: str) -> Any:
    """A store change noting that the record ``key`` is durable in its log."""

    def change(entry: ApprovalEntry) -> ApprovalEntry:
        if key in entry.logged:
            return entry
        claims = {k: v for k, v in entry.claims.items() if k != key}
        return entry.replace(logged=(*entry.logged, key), claims=claims)

    return change


def request_body(entry: ApprovalEntry, store: str, trusted_keys: dict[str, Any]) -> dict[str, Any]:
    """What was asked, of whom, until when; ``trusted_keys`` says whose signatures will count."""
    return {
        "request": entry.id, "tool": entry.tool, "semantics": entry.semantics, "rule": entry.rule,
        "reason": entry.reason, "reasons": [list(r) for r in entry.reasons], "args": entry.args,
        "targets": list(entry.levels[0][0]) if entry.levels else [],
        "levels": [{"targets": list(t), "after_seconds": a} for t, a in entry.levels],
        "requested_at": iso(entry.created_at), "expires_at": iso(entry.deadline),
        "timeout": entry.deadline - entry.created_at, "store": store, "trusted_keys": trusted_keys,
        # The deadline the gateway holds to, in seconds: what the log says, not what the store says.
        "deadline": entry.deadline,
    }


def escalation_body(entry: ApprovalEntry, level: int) -> dict[str, Any]:
    targets, after = entry.levels[level]
    return {
        "request": entry.id, "tool": entry.tool, "rule": entry.rule, "level": level + 1,
        "targets": list(targets), "after_seconds": after, "args": entry.args,
    }


def decision_type(entry: ApprovalEntry) -> RecordType:
    if not entry.decided:
        raise ValueError(f"request {entry.id} is still pending: there is no decision to record")
    return _DECISION_TYPES[entry.status]


def decision_body(entry: ApprovalEntry, written_by: str) -> dict[str, Any]:
    """Who decided, why, about which arguments, and when -- the record an auditor reads."""
    return {
        "request": entry.id, "tool": entry.tool, "rule": entry.rule, "reason": entry.reason,
        "args": entry.args, "status": entry.status.value, "approver": entry.approver, "note": entry.note,
        "decided_at": iso(entry.decided_at if entry.decided_at is not None else entry.deadline),
        "requested_at": iso(entry.created_at), "via": entry.decided_via, "written_by": written_by,
        "requires_review": entry.requires_review, "signed_by": entry.signer,
    }


@dataclass(frozen=True, slots=True)
class Remembered:
    """What the saga's log already says about one request (the store may say otherwise)."""

    #: The deadline of the first APPROVAL_REQUESTED record, if the log holds one.
    deadline: float | None = None
    #: The body of a decision that refuses for good: a person's denial, or an expiry.
    refusal: dict[str, Any] | None = None
    refusal_type: str | None = None


_REFUSALS = (RecordType.APPROVAL_DENIED.value, RecordType.APPROVAL_EXPIRED.value)


def remembered(records: Iterable[dict[str, Any]], saga_id: str, request: str) -> Remembered:
    """Read ``records`` (a log) for request ``request`` of saga ``saga_id``.

    A denial by a person and an expiry are final: the agent can delete or edit its
    store entry, never the hash-chained record. A denial by nobody (a webhook that
    failed, a grant that was not authenticated) is not: nobody was asked, or nobody
    trusted answered, so asking again is no replay of a person's "no".
    """
    deadline: float | None = None
    for record in records:
        if record.get("saga") != saga_id:
            continue
        rtype = record.get("type")
        body = record.get("body")
        if not isinstance(body, dict) or body.get("request") != request:
            continue
        if rtype == RecordType.APPROVAL_REQUESTED.value and deadline is None:
            deadline = _deadline(body)
        elif rtype in _REFUSALS and (rtype == RecordType.APPROVAL_EXPIRED.value or body.get("approver") is not None):
            return Remembered(deadline, body, str(rtype))
    return Remembered(deadline)


def _deadline(body: dict[str, Any]) -> float | None:
    value = body.get("deadline")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = body.get("expires_at")  # written before "deadline" was
    if isinstance(text, str):
        try:
            when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
        except ValueError:
            return None
        return when.timestamp()
    return None
