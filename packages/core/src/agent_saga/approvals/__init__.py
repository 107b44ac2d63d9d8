"""Durable human approvals: the gate's approval provider, with a shared store, the log, and a CLI.

``ApprovalGateway`` writes each request to a store and to the log before anyone
is notified, waits for the decision by polling the store (no connection into
the agent), escalates through the policy's levels, expires at a mandatory
deadline, and records the decision -- with the approver, the note, the step's
arguments and the time -- in the hash-chained log. A grant counts only when it is
signed by a key the host trusts (``SigningKey``, ``TrustedKeys``): the agent can
write the store, not sign. A policy can require a passkey instead (``require_passkey``): a
WebAuthn assertion over the action, checked against the host's registered passkeys
(``PasskeyCredentials``; needs ``pip install 'agent-saga[passkey]>=3.0.0'``). Every failure denies.
``RedisApprovalStore`` imports redis-py only when created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.approvals._approval_policy import ApprovalPolicy, EscalationLevel
from agent_saga.approvals._authority import SigningKey, TrustedKeys, trust_key
from agent_saga.approvals._decide import decide
from agent_saga.approvals._entry import ApprovalEntry, Status, request_id
from agent_saga.approvals._errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalNotAuthenticated,
    ApprovalNotFound,
    ApprovalNotPending,
    ApprovalUnavailable,
    NotificationFailed,
)
from agent_saga.approvals._gateway import ApprovalGateway
from agent_saga.approvals._notify import ConsoleNotifier, Notification, Notifier, WebhookNotifier
from agent_saga.approvals._passkey import (
    PasskeyCredential,
    PasskeyCredentials,
    passkey_challenge,
    passkey_denial_challenge,
    trust_passkey,
)
from agent_saga.approvals._redis_store import RedisApprovalStore
from agent_saga.approvals._store import ApprovalStore, FileApprovalStore, find, open_store

__all__ = [
    "ApprovalEntry",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalGateway",
    "ApprovalNotAuthenticated",
    "ApprovalNotFound",
    "ApprovalNotPending",
    "ApprovalPolicy",
    "ApprovalStore",
    "ApprovalUnavailable",
    "ConsoleNotifier",
    "EscalationLevel",
    "FileApprovalStore",
    "Notification",
    "NotificationFailed",
    "Notifier",
    "PasskeyCredential",
    "PasskeyCredentials",
    "RedisApprovalStore",
    "SigningKey",
    "Status",
    "TrustedKeys",
    "WebhookNotifier",
    "decide",
    "find",
    "open_store",
    "passkey_challenge",
    "passkey_denial_challenge",
    "request_id",
    "trust_key",
    "trust_passkey",
]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
