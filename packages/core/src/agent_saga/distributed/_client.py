"""httpx transports that make a request to a trusted service, inside a saga, a step of that saga.

::

    trust_service("billing", "http://billing.internal:8001", [BILLING_VERIFIER_KEY])
    http = httpx.Client(transport=SagaTransport())
    with saga_scope(wal):
        http.post("http://billing.internal:8001/charges", json={"order": "o-1"})   # step http:billing

A request goes through untouched when no saga is current, or when its URL is not under a
trusted service's base URL (the saga's context is never sent anywhere else). Otherwise it
is one COMPENSABLE step ``http:<service>`` of the current saga: the transport sends the
``saga-context`` header with the step's idempotency key, reads the answer (bounded), and the
step's undo is the HTTP compensation built from the service's signed token. A lost answer
(the connection broke after sending) is settled by the service's reconciler, and the
transport then returns the response the service kept for the key.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from agent_saga.context import current_saga
from agent_saga.distributed._header import HEADER, SagaContext, saga_hex
from agent_saga.distributed._middleware import MAX_BODY
from agent_saga.distributed._remote import RemoteUndo, outcome
from agent_saga.distributed._services import RemoteService, services, tool_name
from agent_saga.distributed._token import MAX_TOKEN, TOKEN_HEADER
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.engine.saga import Saga
from agent_saga.errors import ConfigurationError, NotApplied
from agent_saga.semantics import ActionSemantics

__all__ = ["AsyncSagaTransport", "RemoteStepFailed", "SagaTransport"]


class RemoteStepFailed(RuntimeError):
    """A service answered a remote step with an error and no compensation token.

    The step is then settled by the service's reconciler (its ledger says whether anything
    ran), not by this answer alone: a proxy in between may have answered instead.
    """


def _service(request: httpx.Request) -> RemoteService | None:
    url = request.url
    return service_for(url.scheme, url.host, url.port, url.path)


def service_for(scheme: str, host: str, port: int | None, path: str) -> RemoteService | None:
    """The trusted service a URL is under, if any."""
    port = port or (443 if scheme == "https" else 80)
    for service in services():
        if service.serves(scheme, host, port, path):
            return service
    return None


def step_context(saga: Saga, key: str) -> SagaContext:
    step = next((s.index for s in reversed(saga.steps) if s.operation_id == key), None)
    if step is None:  # pragma: no cover - the engine passes the key of the step it runs
        raise ConfigurationError("the remote step's idempotency key names no step of the current saga")
    return SagaContext(saga_hex(saga.saga_id), step, key)


def _result(service: RemoteService, key: str, response: httpx.Response, body: bytes) -> dict[str, Any]:
    return answered(service, key, response.status_code, response.headers.get_list(TOKEN_HEADER),
                    response.headers.get("content-type"), body)


def answered(service: RemoteService, key: str, status: int, tokens: list[str], content_type: str | None,
             body: bytes) -> dict[str, Any]:
    """The outcome of a remote step from the service's answer (any HTTP client); raise when it has none."""
    token = tokens[0] if len(tokens) == 1 and len(tokens[0]) <= MAX_TOKEN else None
    if token is None and status >= 400:
        raise RemoteStepFailed(f"{service.name} answered HTTP {status} with no compensation token")
    if token is None and tokens:
        token = "refused: more than one token, or one over the size limit"  # verified (and refused) by the undo
    return outcome(key, status, content_type, body, token)


def _response(result: Any, request: httpx.Request) -> httpx.Response:
    """The service's answer as the caller's code reads it (rebuilt from the bounded body)."""
    headers = {"content-type": result["content_type"]} if result.get("content_type") else {}
    if result.get("token") is not None:
        headers[TOKEN_HEADER] = result["token"]
    return httpx.Response(result["status"], headers=headers, content=base64.b64decode(result["body"]),
                          request=request)


def _refuse_manual(request: httpx.Request) -> None:
    if HEADER in request.headers:
        raise ConfigurationError(
            "a request sent through SagaTransport carries its own saga-context header: the transport sets it "
            "(from the current saga's step); remove it"
        )


class StepArgs:
    def __init__(self, reconcile: ReconcilePolicy | bool, wait_for_commit: bool | None) -> None:
        self.reconcile = reconcile
        self.wait_for_commit = wait_for_commit

    def step(self, service: RemoteService, method: str, path: str) -> dict[str, Any]:
        more: dict[str, Any] = {
            "tool": tool_name(service.name), "semantics": ActionSemantics.COMPENSABLE,
            "compensate": RemoteUndo(service), "reconcile": self.reconcile, "record_result": "none",
            # What the log keeps of the call: the service, the method and the path (no query, no body).
            "args": {"service": service.name, "method": method, "path": path},
        }
        if self.wait_for_commit is not None:
            more["wait_for_commit"] = self.wait_for_commit
        return more


class SagaTransport(httpx.BaseTransport):
    """A sync httpx transport: requests to trusted services inside a saga are its steps (see the module)."""

    def __init__(
        self, transport: httpx.BaseTransport | None = None, *, reconcile: ReconcilePolicy | bool = True,
        wait_for_commit: bool | None = None,
    ) -> None:
        self._inner = transport or httpx.HTTPTransport()
        self._options = StepArgs(reconcile, wait_for_commit)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _refuse_manual(request)
        saga = current_saga()
        service = _service(request) if saga is not None else None
        if saga is None or service is None:
            return self._inner.handle_request(request)

        def forward(idempotency_key: str) -> dict[str, Any]:
            request.headers[HEADER] = step_context(saga, idempotency_key).header()
            try:
                response = self._inner.handle_request(request)
            except httpx.ConnectError as err:
                raise NotApplied(f"{service.name}: could not connect, nothing was sent ({err})") from err
            try:
                body = read_bounded(response.iter_bytes(), service)
            finally:
                response.close()
            return _result(service, idempotency_key, response, body)

        step = self._options.step(service, request.method, request.url.path)
        result = saga.execute_sync(forward=forward, inline=True, **step)
        return _response(result, request)

    def close(self) -> None:
        self._inner.close()


class AsyncSagaTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`SagaTransport` (for ``httpx.AsyncClient`` in an ``async with`` saga)."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport | None = None, *, reconcile: ReconcilePolicy | bool = True,
        wait_for_commit: bool | None = None,
    ) -> None:
        self._inner = transport or httpx.AsyncHTTPTransport()
        self._options = StepArgs(reconcile, wait_for_commit)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _refuse_manual(request)
        saga = current_saga()
        service = _service(request) if saga is not None else None
        if saga is None or service is None:
            return await self._inner.handle_async_request(request)

        async def forward(idempotency_key: str) -> dict[str, Any]:
            request.headers[HEADER] = step_context(saga, idempotency_key).header()
            try:
                response = await self._inner.handle_async_request(request)
            except httpx.ConnectError as err:
                raise NotApplied(f"{service.name}: could not connect, nothing was sent ({err})") from err
            body = bytearray()
            try:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise RemoteStepFailed(f"{service.name}'s answer is over {MAX_BODY} bytes; not read further")
            finally:
                await response.aclose()
            return _result(service, idempotency_key, response, bytes(body))

        step = self._options.step(service, request.method, request.url.path)
        result = await saga.execute(forward=forward, inline=True, **step)
        return _response(result, request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def read_bounded(stream: Any, service: RemoteService) -> bytes:
    """The chunks of ``stream``, refused past :data:`MAX_BODY` bytes."""
    body = bytearray()
    for chunk in stream:
        body += chunk
        if len(body) > MAX_BODY:
            raise RemoteStepFailed(f"{service.name}'s answer is over {MAX_BODY} bytes; not read further")
    return bytes(body)
