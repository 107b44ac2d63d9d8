"""One approval request as the store keeps it: what was asked, who was told, what was decided.

The id is a pure function of (saga id, step, tool, rule): a retried step, or a
restarted process running the same saga again, computes the same id and finds
the request (and any decision) already there instead of asking a second time.
Arguments whose names look like secrets are redacted before a request is made
(:mod:`agent_saga.redaction`): the store, the log and every notification carry
the marked redaction, never the value.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.gate import ApprovalRequest
from agent_saga.log.codec import canonical
from agent_saga.redaction import redact_args

__all__ = ["SHORT_ID", "ApprovalEntry", "Change", "Status", "new_entry", "request_id", "short_ids"]

#: Characters of the id shown to people; ``approve`` accepts any unique prefix.
SHORT_ID = 8
_VERSION = 1


class Status(enum.StrEnum):
    PENDING = "PENDING"
    GRANTED = "GRANTED"
    DENIED = "DENIED"
    EXPIRED = "EXPIRED"
    BREAK_GLASS = "BREAK_GLASS"


def request_id(saga_id: str, step: int, tool: str, rule: str) -> str:
    """32 hex characters of SHA-256 over the four fields that identify a request."""
    return hashlib.sha256(canonical(["approval", saga_id, step, tool, rule]).encode()).hexdigest()[:32]


def _shown_args(args: Mapping[str, Any]) -> dict[str, Any]:
    # Secrets redacted, then the same text the log would write (unencodable values
    # become "<type>"), so the args a person approves are exactly the args recorded.
    value = json.loads(canonical(redact_args(args)))
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class ApprovalEntry:
    """A request and its state. Times are wall-clock seconds (every process compares them)."""

    id: str
    saga_id: str
    step: int
    tool: str
    rule: str
    reason: str
    semantics: str
    args: dict[str, Any]
    created_at: float
    deadline: float
    #: The chain as it stood when the request was made: ((targets...), after_seconds) per level.
    levels: tuple[tuple[tuple[str, ...], float], ...]
    reasons: tuple[tuple[str, str], ...] = ()
    status: Status = Status.PENDING
    approver: str | None = None
    note: str = ""
    decided_at: float | None = None
    decided_via: str = ""
    #: Levels whose turn has come and been taken by some process (0 is the first ask).
    escalated: tuple[int, ...] = ()
    #: Levels whose notification was delivered.
    notified: tuple[int, ...] = ()
    #: "<event>@<log location>" for every record already durable in that log.
    logged: tuple[str, ...] = ()
    #: "<event>@<log location>" -> when a writer announced it is writing that record.
    claims: dict[str, float] = field(default_factory=dict)
    #: "<name>+<key id>" of the key that signed the decision, and the base64 signature
    #: (see agent_saga.approvals._authority); None when nobody signed.
    signer: str | None = None
    signature: str | None = None
    #: A passkey grant's or denial's WebAuthn assertion (``PublicKeyCredential.toJSON()``), checked
    #: by the gateway (agent_saga.approvals._passkey); None for every other decision.
    passkey: dict[str, Any] | None = None
    #: Whether the gateway that asked requires a passkey grant (its policy). A hint for the people
    #: and tools reading the store (the notice, ``approvals approve``), never a check: the store is
    #: the agent's to write, and the gateway decides from its own policy.
    passkey_required: bool = False

    @property
    def decided(self) -> bool:
        return self.status is not Status.PENDING

    @property
    def granted(self) -> bool:
        return self.status in (Status.GRANTED, Status.BREAK_GLASS)

    @property
    def requires_review(self) -> bool:
        return self.status is Status.BREAK_GLASS

    def replace(self, **changes: Any) -> ApprovalEntry:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        # "passkey" (and "passkey_required") only when there is one: an entry without reads as it always did.
        passkey: dict[str, Any] = {} if self.passkey is None else {"passkey": self.passkey}
        if self.passkey_required:
            passkey["passkey_required"] = True
        return {
            "version": _VERSION,
            "id": self.id, "saga_id": self.saga_id, "step": self.step, "tool": self.tool,
            "rule": self.rule, "reason": self.reason, "semantics": self.semantics, "args": self.args,
            "created_at": self.created_at, "deadline": self.deadline,
            "levels": [[list(targets), after] for targets, after in self.levels],
            "reasons": [list(r) for r in self.reasons],
            "status": self.status.value, "approver": self.approver, "note": self.note,
            "decided_at": self.decided_at, "decided_via": self.decided_via,
            "escalated": list(self.escalated), "notified": list(self.notified),
            "logged": list(self.logged), "claims": dict(self.claims),
            "signer": self.signer, "signature": self.signature, **passkey,
        }

    @classmethod
    def from_json(cls, data: Any) -> ApprovalEntry:
        """Parse what :meth:`to_json` wrote; ValueError for anything else."""
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            raise ValueError("not a version-1 approval request")
        try:
            return cls(
                id=str(data["id"]), saga_id=str(data["saga_id"]), step=int(data["step"]),
                tool=str(data["tool"]), rule=str(data["rule"]), reason=str(data["reason"]),
                semantics=str(data["semantics"]), args=dict(data["args"]),
                created_at=float(data["created_at"]), deadline=float(data["deadline"]),
                levels=tuple((tuple(str(t) for t in targets), float(after)) for targets, after in data["levels"]),
                reasons=tuple((str(r), str(why)) for r, why in data.get("reasons", ())),
                status=Status(data["status"]),
                approver=None if data.get("approver") is None else str(data["approver"]),
                note=str(data.get("note", "")),
                decided_at=None if data.get("decided_at") is None else float(data["decided_at"]),
                decided_via=str(data.get("decided_via", "")),
                escalated=tuple(int(i) for i in data.get("escalated", ())),
                notified=tuple(int(i) for i in data.get("notified", ())),
                logged=tuple(str(k) for k in data.get("logged", ())),
                claims={str(k): float(v) for k, v in dict(data.get("claims", {})).items()},
                signer=None if data.get("signer") is None else str(data["signer"]),
                signature=None if data.get("signature") is None else str(data["signature"]),
                passkey=None if data.get("passkey") is None else dict(data["passkey"]),
                passkey_required=data.get("passkey_required") is True,
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed approval request: {err!r}") from err


def new_entry(request: ApprovalRequest, now: float, timeout: float,
              levels: tuple[tuple[tuple[str, ...], float], ...]) -> ApprovalEntry:
    step = request.step
    return ApprovalEntry(
        id=request_id(step.saga_id, step.step, step.tool, request.rule),
        saga_id=step.saga_id, step=step.step, tool=step.tool, rule=request.rule, reason=request.reason,
        semantics=str(step.semantics), args=_shown_args(step.args), created_at=now, deadline=now + timeout,
        levels=levels, reasons=tuple(request.reasons),
    )


def short_ids(ids: list[str]) -> dict[str, str]:
    """For each id, its shortest prefix of at least SHORT_ID characters shared by no other id."""
    out: dict[str, str] = {}
    ordered = sorted(set(ids))
    for i, rid in enumerate(ordered):
        need = SHORT_ID
        for other in (ordered[i - 1] if i else None, ordered[i + 1] if i + 1 < len(ordered) else None):
            if other is None:
                continue
            common = 0
            while common < min(len(rid), len(other)) and rid[common] == other[common]:
                common += 1
            need = max(need, common + 1)
        out[rid] = rid[:need]
    return out


#: A change to one entry, applied under the store's lock (``store.update(request_id, change)``).
Change = Callable[[ApprovalEntry], ApprovalEntry]
