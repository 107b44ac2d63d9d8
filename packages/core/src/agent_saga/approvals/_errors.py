"""Why an approval did not come back as a person's yes or no.

Each of these refuses the step (the gate turns any exception from a provider
into a refusal): an approval path that broke must never let the action through.
"""

from __future__ import annotations

from agent_saga.errors import ConfigurationError, SagaError

__all__ = [
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalNeedsPasskey",
    "ApprovalNotAuthenticated",
    "ApprovalNotFound",
    "ApprovalNotPending",
    "ApprovalUnavailable",
    "NotificationFailed",
]


class ApprovalError(SagaError):
    """Base class of the approval workflow's errors."""


class ApprovalExpired(ApprovalError):
    """The deadline passed with no decision; expiry denies."""


class ApprovalNotAuthenticated(ApprovalError):
    """A decision in the store that the approvals CLI or API did not sign with a trusted key: denied.

    The message says what is missing or wrong; it names no secret.
    """


class ApprovalUnavailable(ApprovalError):
    """The approval could not be asked or observed (store unreachable, notifier broken): denied."""


class NotificationFailed(ApprovalError):
    """A notifier could not deliver a request (connection error, non-2xx answer)."""


class ApprovalNotFound(ApprovalError, LookupError):
    """No request matches the id or prefix given, or the prefix matches several."""


class ApprovalNeedsPasskey(ApprovalError, ConfigurationError):
    """A grant asked for where the request needs a passkey: only the passkey page can give it."""


class ApprovalNotPending(ApprovalError):
    """The request was already decided, or its deadline passed: it cannot be decided again."""
