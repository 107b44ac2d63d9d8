"""Deciding a request from outside the agent: the CLI, or a web process behind a chat button.

A decision is one compare-and-set on the store (only a pending request before
its deadline can be decided, and only once); the waiting saga sees it on its
next poll. A grant must be signed with the decider's key (``key=``): the waiting
gateway acts only on a grant signed by a key its host trusts
(:mod:`agent_saga.approvals._authority`). With ``wal=`` the decision is also
written to that log here; without it, the agent's gateway writes it into its own
log when it observes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from agent_saga.approvals._authority import SigningKey, approver_name
from agent_saga.approvals._entry import SHORT_ID, ApprovalEntry, Status
from agent_saga.approvals._errors import ApprovalNeedsPasskey, ApprovalNotPending
from agent_saga.approvals._evidence import decision_body, decision_type, iso, log_key, mark_logged
from agent_saga.approvals._passkey import passkey_digest
from agent_saga.approvals._store import ApprovalStore, find
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL

__all__ = ["Verdict", "decide"]

Verdict = Literal["approve", "deny", "break-glass"]
_STATUS: dict[str, Status] = {"approve": Status.GRANTED, "deny": Status.DENIED, "break-glass": Status.BREAK_GLASS}


def decide(
    store: ApprovalStore,
    ref: str,
    verdict: Verdict,
    *,
    approver: str,
    note: str = "",
    key: SigningKey | None = None,
    wal: WAL | None = None,
    via: str = "api",
    clock: Callable[[], float] = time.time,
) -> ApprovalEntry:
    """Approve, deny or break-glass the request ``ref`` (its id or a unique prefix); return it decided.

    ``key`` signs the decision; a grant (approve, break-glass) without one is
    refused, since no gateway would act on it, and so is any grant of a request that needs
    a passkey (ApprovalNeedsPasskey, a ConfigurationError naming the page). Raises ConfigurationError for a
    missing, blank or invisible approver name, a grant without a key or a
    break-glass without a note; ApprovalNotFound for an unknown or ambiguous id;
    ApprovalNotPending when it was already decided or has expired;
    StoreUnavailable when the store cannot be reached.
    """
    if verdict not in _STATUS:
        raise ConfigurationError(f"verdict must be one of {sorted(_STATUS)}, got {verdict!r}")
    approver = approver_name(approver)
    entry = find(store, ref)
    if entry.passkey_required and verdict != "deny":
        # Before any key matters: no key-signed grant counts here, so none is asked for.
        raise ApprovalNeedsPasskey(
            f"request {entry.id[:SHORT_ID]} needs a passkey (rule {entry.rule}): {verdict} it on the page "
            f"`agent-saga approvals serve` opens, where it signs action sha256:{passkey_digest(entry, entry.deadline)}; "
            "a key-signed grant is refused by the waiting gateway (deny works here)"
        )
    if key is None and verdict != "deny":
        raise ConfigurationError(
            f"a grant must be signed with the approver's key (key=SigningKey.load(...)): an unsigned "
            f"{verdict} is denied by the waiting gateway"
        )
    if verdict == "break-glass" and not (isinstance(note, str) and note.strip()):
        raise ConfigurationError(
            "break-glass needs --note saying why the normal approval could not wait: it is reviewed afterwards"
        )
    status = _STATUS[verdict]
    now = clock()
    logged_as = log_key("decided", wal) if wal is not None else None

    def change(current: ApprovalEntry) -> ApprovalEntry:
        short = current.id[:SHORT_ID]
        if current.decided:
            who = f" by {current.approver}" if current.approver else ""
            raise ApprovalNotPending(f"request {short} is already {current.status.value}{who}; it cannot be decided again")
        if now >= current.deadline:
            raise ApprovalNotPending(
                f"request {short} expired at {iso(current.deadline)}: expiry denies, and the step will not run"
            )
        claims = dict(current.claims)
        if logged_as is not None:
            claims[logged_as] = now  # tells the waiting gateway this log's record is being written here
        decided = current.replace(
            status=status, approver=approver, note=note, decided_at=now, decided_via=via, claims=claims
        )
        return key.sign(decided) if key is not None else decided

    decided = store.update(entry.id, change)
    if wal is not None and logged_as is not None:
        ticket = wal.append(decision_type(decided), decided.saga_id, decision_body(decided, via), decided.step)
        wal.barrier(ticket)
        decided = store.update(decided.id, mark_logged(logged_as))
    return decided
