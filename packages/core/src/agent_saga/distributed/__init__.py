"""A step run by another service joins the caller's saga, over HTTP (docs/DISTRIBUTED.md).

Caller: :func:`trust_service` (a service's name, URL and verifier keys) and an httpx client
with :class:`SagaTransport` / :class:`AsyncSagaTransport`. Service:
:class:`SagaContextMiddleware` in front of the app and, in a route, :func:`remote_step`
to declare the undo. Needs ``pip install 'agent-saga[http]>=3.0.0'`` (httpx and
cryptography; ``requests`` users mount
:class:`~agent_saga.distributed.requests_adapter.SagaAdapter`, which needs requests too); the
service side needs only cryptography. Names are resolved on use, so ``import
agent_saga.distributed`` costs nothing until one is touched.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "HEADER",
    "TOKEN_HEADER",
    "AsyncSagaTransport",
    "CompensationToken",
    "Ledger",
    "RemoteService",
    "RemoteStep",
    "RemoteStepFailed",
    "SagaContext",
    "SagaContextMiddleware",
    "SagaContextRefused",
    "SagaTransport",
    "TokenRefused",
    "compensate_remote",
    "forget_services",
    "parse_saga_context",
    "remote_step",
    "sign_token",
    "trust_service",
    "verify_token",
]

_HOMES = {
    "HEADER": "_header", "SagaContext": "_header", "SagaContextRefused": "_header", "parse_saga_context": "_header",
    "TOKEN_HEADER": "_token", "CompensationToken": "_token", "TokenRefused": "_token", "sign_token": "_token",
    "verify_token": "_token",
    "Ledger": "_service_ledger",
    "RemoteService": "_services",
    "RemoteStep": "_scope", "remote_step": "_scope",
    "SagaContextMiddleware": "_middleware",
    "compensate_remote": "_remote", "forget_services": "_remote", "trust_service": "_remote",
    "AsyncSagaTransport": "_client", "RemoteStepFailed": "_client", "SagaTransport": "_client",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent_saga.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agent_saga.distributed.{home}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
