"""The caller's side of a remote step, apart from the transport: trust, the undo, the question.

* :func:`trust_service` binds a service name to its URL and keys, and registers the
  reconciler of its steps (tool ``http:<name>``): "what did you do for key K", asked of
  ``GET <base><prefix>/status/K`` when a response was lost (inline by the engine, by the
  recovery daemon for a step in flight, by ``agent-saga reconcile``).
* :func:`compensate_remote` is the registered undo (``agent_saga.http.compensate``) that
  POSTs the token and the undo's idempotency key to the service's compensation endpoint,
  so the caller's rollback and its recovery daemon (after a ``kill -9``) run it alike.
* :class:`RemoteUndo` builds that undo from a step's outcome and leaves its recipe in the
  intent record (``$.token``), so the daemon can build it from the reconciler's answer.

Every answer of a service is bounded and parsed strictly; a token is believed only when it
verifies against the keys trusted for that service and names the step's own key, and a
"compensated" only with the service's receipt for that very token, signed with a key
trusted for it (anything else at the service's URL could say "compensated").
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import httpx

from agent_saga.distributed import _services as registry
from agent_saga.distributed._services import RemoteService, parse_service, tool_name, trusted_service
from agent_saga.distributed._token import (
    MAX_TOKEN,
    ReceiptRefused,
    TokenRefused,
    verify_receipt,
    verify_token,
)
from agent_saga.errors import CompensationError, CompensationUnproven
from agent_saga.inert import inert
from agent_saga.registry import compensator, reconciler, unregister_reconciler
from agent_saga.semantics import Compensation, Observation

__all__ = [
    "HANDLER",
    "MAX_ANSWER",
    "RemoteUndo",
    "compensate_remote",
    "forget_services",
    "outcome",
    "trust_service",
]

#: The registered name of the HTTP undo.
HANDLER = "agent_saga.http.compensate"
#: The largest answer read from a service's status or compensation endpoint, in bytes.
MAX_ANSWER = 2 * (1 << 20)
_STATES = frozenset({"running", "done", "failed", "fenced", "compensating", "compensated"})


def trust_service(
    name: str, base_url: str, keys: Any, *, prefix: str = "/_saga", timeout: float = 30.0
) -> RemoteService:
    """Trust ``name`` at ``base_url``, whose compensation tokens one of ``keys`` signs.

    ``keys``: verifier key strings (``<name>+<id>+<base64>``, what ``generate_signer``
    returns second). Requests sent under ``base_url`` inside a saga through
    :class:`~agent_saga.distributed.SagaTransport` become steps ``http:<name>``, and
    the reconciler of those steps is registered here. Trusting a name again replaces it.
    """
    service = parse_service(name, base_url, keys, prefix=prefix, timeout=timeout)
    registry.add(service)
    reconciler(tool_name(name))(_reconciler(name))
    return service


def forget_services() -> None:
    """Trust no service, and drop their reconcilers (tests start from none)."""
    for name in registry.forget():
        unregister_reconciler(tool_name(name))


def _bounded(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise CompensationError(f"the service's answer is over {limit} bytes; not read further")
    return bytes(body)


def _answer(response: httpx.Response) -> Any:
    raw = _bounded(response, MAX_ANSWER)
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _request(method: str, url: str, service: RemoteService, **kwargs: Any) -> tuple[int, Any]:
    # follow_redirects off: the service's answer never chooses where the caller goes next.
    with httpx.Client(timeout=service.timeout, follow_redirects=False, trust_env=False) as http, \
            http.stream(method, url, **kwargs) as response:
        return response.status_code, _answer(response)


def _detail(value: Any) -> str:
    """A service's error text as data: one inert line, bounded."""
    text = value.get("error") if isinstance(value, dict) else None
    return inert(text)[:300] if isinstance(text, str) else "no error text"


@compensator(HANDLER)
def compensate_remote(service: str, signed_undo: str, idempotency_key: str | None = None) -> dict[str, Any]:
    """Ask ``service`` (trusted by name in this process) to undo the step its token ``signed_undo`` names, once.

    (The kwarg is not called ``token``: a name that reads as a credential is refused from the log.
    It is the service's signed promise of one undo, for the step the caller wants undone.)
    """
    remote = trusted_service(service)
    body = {"token": signed_undo, "key": idempotency_key or ""}
    status, answer = _request("POST", remote.compensate_url, remote, json=body)
    if status == 200 and isinstance(answer, dict) and answer.get("state") == "compensated" \
            and isinstance(answer.get("first"), bool):
        try:
            verify_receipt(answer.get("receipt"), remote.keys, service=remote.name, token=signed_undo)
        except ReceiptRefused as err:
            raise CompensationUnproven(
                f"{service} answered compensated, but {err}: reported-but-unproven, the undo is not counted as done"
            ) from None
        return {"first": answer["first"]}
    raise CompensationError(f"{service} did not compensate: HTTP {status}: {_detail(answer)}")


def outcome(key: str, status: int, content_type: str | None, body: bytes, token: str | None) -> dict[str, Any]:
    """A remote step's outcome as the engine holds it: what the undo is built from (``$.token``)."""
    return {"key": key, "status": status, "content_type": content_type,
            "body": base64.b64encode(body).decode("ascii"), "token": token}


def checked(service: RemoteService, key: str, token: object) -> str:
    """``token``, if it verifies against ``service``'s keys and is for ``service`` and ``key``."""
    claims = verify_token(token, service.keys)
    if claims.service != service.name:
        raise TokenRefused(f"compensation token refused: it is for service {inert(claims.service)!r}, "
                           f"not {service.name!r}")
    if claims.context.key != key:
        raise TokenRefused("compensation token refused: it is for another step's key")
    assert isinstance(token, str)
    return token


class RemoteUndo:
    """The undo of a remote step: ``compensate_remote(service=..., token=...)``, built from its outcome."""

    known_before_call = False

    def __init__(self, service: RemoteService) -> None:
        self.service = service

    @property
    def recipe(self) -> dict[str, Any]:
        return {"handler": HANDLER, "paths": {"signed_undo": "$.token"}, "literals": {"service": self.service.name}}

    def __call__(self, result: Any) -> Compensation:
        name = self.service.name
        if not isinstance(result, Mapping) or not isinstance(result.get("key"), str):
            raise CompensationError(f"the remote step of {name!r} has no outcome to build its undo from")
        if result.get("token") is None:
            raise CompensationError(
                f"{name} answered HTTP {result.get('status')} with no compensation token: what it did "
                "cannot be undone from here (its route declares no undo: remote_step().compensate_with)"
            )
        try:
            token = checked(self.service, result["key"], result["token"])
        except TokenRefused as err:
            raise CompensationError(f"{name}: {err}; the effect stands, undo it by hand") from None
        return Compensation(fn=compensate_remote, handler=HANDLER, kwargs={"service": name, "signed_undo": token},
                            description=f"POST {name}'s compensation endpoint with its token")


def _reconciler(name: str) -> Any:
    def ask(idempotency_key: str, **_: Any) -> Observation:
        return _ask(trusted_service(name), idempotency_key)

    return ask


def _ask(remote: RemoteService, key: str) -> Observation:
    """What ``remote`` did for ``key``, from its ledger: the reconciler of ``http:<service>``."""
    status, answer = _request("GET", remote.status_url(key), remote)
    if status != 200 or not isinstance(answer, dict) or answer.get("state") not in _STATES:
        return Observation(None, detail=f"{remote.name} answered HTTP {status}: {_detail(answer)}")
    state = answer["state"]
    if state in ("fenced", "failed"):
        why = "never ran (fenced now)" if state == "fenced" else "failed and rolled back its part"
        return Observation(False, detail=f"{remote.name}: the step {why}")
    if state == "running":
        return Observation(None, detail=f"{remote.name}: the step is still being served, or its process died")
    result = _stored(answer, key)
    if result is None:
        return Observation(None, detail=f"{remote.name}: its answer is not a remote step's outcome")
    if result["token"] is not None:
        try:
            checked(remote, key, result["token"])
        except TokenRefused as err:
            return Observation(None, detail=f"{remote.name}: {err}")
    # Whether the undo is in effect too, for the reconciliation pass (agent-saga reconcile):
    # "compensated" only with the service's receipt for this token.
    reversed_ = {"compensated": True, "done": False}.get(state)
    detail = f"{remote.name}: the step ran ({state})"
    if reversed_ is True:
        try:
            verify_receipt(answer.get("receipt"), remote.keys, service=remote.name, token=str(result["token"]))
        except ReceiptRefused as err:
            reversed_, detail = None, f"{remote.name}: reported compensated, unproven: {err}"
    return Observation(True, reversed_, detail=detail, result=result)


def _stored(answer: dict[str, Any], key: str) -> dict[str, Any] | None:
    status, content_type, body, token = (answer.get(k) for k in ("status", "content_type", "body", "token"))
    if type(status) is not int or not 100 <= status <= 599:
        return None
    if content_type is not None and (not isinstance(content_type, str) or len(content_type) > 256):
        return None
    if token is not None and (not isinstance(token, str) or len(token) > MAX_TOKEN):
        return None
    if not isinstance(body, str):
        return None
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None
    return outcome(key, status, content_type, raw, token)
