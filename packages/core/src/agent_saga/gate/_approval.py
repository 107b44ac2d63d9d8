"""What the gate asks of whoever approves a step: the approval provider interface.

The gate does not know how a human is reached (a queue, a chat prompt, a CLI);
it hands a provider one :class:`ApprovalRequest` and acts on the
:class:`ApprovalDecision`. Anything other than an explicit approval -- a denial,
an exception, a malformed answer -- refuses the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent_saga.engine.ports import StepRequest

__all__ = ["ApprovalDecision", "ApprovalProvider", "ApprovalRequest"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One step waiting for a human, and every reason it needs one.

    ``rule`` names the first reason (a rule name, or ``limit:<name>`` for an
    over-budget escalation); ``(saga_id, step, tool, rule)`` identifies the
    request, so a provider can find an earlier answer instead of asking twice.
    """

    step: StepRequest
    rule: str
    reason: str
    reasons: tuple[tuple[str, str], ...] = ()
    escalated_limits: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A provider's answer. Only ``approved=True`` lets the step run."""

    approved: bool
    approver: str | None = None
    note: str = ""


@runtime_checkable
class ApprovalProvider(Protocol):
    """Asks a human. Both forms may wait; both return a decision or raise.

    A raise is a refusal (fail closed): an approval integration that breaks must
    never authorize the action it was meant to show a person.
    """

    def request_approval(self, request: ApprovalRequest) -> ApprovalDecision: ...

    async def request_approval_async(self, request: ApprovalRequest) -> ApprovalDecision: ...
