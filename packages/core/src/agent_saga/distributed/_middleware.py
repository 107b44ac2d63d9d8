"""``SagaContextMiddleware``: a Starlette/FastAPI app serves steps of its callers' sagas.

::

    app.add_middleware(SagaContextMiddleware, service="billing", signer_key=KEY, ledger="billing.ledger")

A pure ASGI middleware (it works in front of any ASGI app). For a request that carries a
``saga-context`` header it:

1. parses the header strictly (400 and one line saying why, otherwise);
2. claims the key in the service's :class:`~agent_saga.distributed.Ledger`: a key
   already served gets the same response and token back without the route running again
   (409 while it is still being served, 409 if it was fenced by a status question);
3. runs the route in a saga of the service's own log (its steps join it) and in a
   :func:`~agent_saga.distributed.remote_step` scope, where the route declares its undo;
4. signs that undo into a compensation token (``saga-compensation`` response header).

It answers two endpoints under ``prefix`` (default ``/_saga``):

* ``POST {prefix}/compensate`` with ``{"token": ..., "key": ...}``: verifies the token (signed by
  this service, for a key it served, exactly the token it issued), runs the undo once per key
  (a saga of the service's log), and answers ``{"state": "compensated", "first": bool,
  "receipt": ...}``, the receipt signed with the token key over the token's hash (what the
  caller believes). A token it did not sign, or that was altered, is refused (403); refusals
  are counted, and written to the log at most once per ``refusal_window`` seconds
  (``COMPENSATIONS_REFUSED``: how many since the last such record, and the latest one's
  reason and token digest), so a flood of bad tokens cannot flood the log;
* ``GET {prefix}/status/<key>``: what it did for the key (the reconciler's question), fencing a
  key it never saw so that a late request with it is refused; a compensated key's answer
  carries its receipt.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from agent_saga.context import saga_scope
from agent_saga.distributed._header import HEADER, SagaContextRefused, parse_saga_context
from agent_saga.distributed._scope import RemoteStep, entered, install
from agent_saga.distributed._service_ledger import Entry, Ledger
from agent_saga.distributed._token import (
    TOKEN_HEADER,
    TokenRefused,
    sign_receipt,
    sign_token,
    signer_public,
    token_digest,
    verify_token,
)
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal, log_argument
from agent_saga.log.records import AUDIT_SAGA
from agent_saga.log.records import RecordType as R
from agent_saga.registry import resolve
from agent_saga.semantics import ActionSemantics

__all__ = ["MAX_BODY", "SagaContextMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The largest response a remote step may return (it is kept in the ledger for retries).
MAX_BODY = 1 << 20
_MAX_REQUEST = 16 * 1024  # the compensation request: a token and a key
_HEADER_BYTES = HEADER.encode()
_TOKEN_BYTES = TOKEN_HEADER.encode()


def _json(status: int, value: Any, extra: list[tuple[bytes, bytes]] | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps(value, separators=(",", ":")).encode()
    return status, [(b"content-type", b"application/json"), *(extra or [])], body


class SagaContextMiddleware:
    """Serve requests that carry a ``saga-context`` as steps of the caller's saga (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        service: str,
        signer_key: str,
        ledger: str | os.PathLike[str] | Ledger,
        wal: WAL | str | os.PathLike[str] | None = None,
        prefix: str = "/_saga",
        refusal_window: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(service, str) or not service or any(c.isspace() or c == ":" for c in service):
            raise ConfigurationError(f"SagaContextMiddleware(service=...) must be a name without spaces or ':', got {service!r}")
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise ConfigurationError(f"SagaContextMiddleware(prefix=...) must start and not end with '/', got {prefix!r}")
        if isinstance(refusal_window, bool) or not isinstance(refusal_window, int | float) or refusal_window < 0:
            raise ConfigurationError(
                f"SagaContextMiddleware(refusal_window=...) must be a number of seconds >= 0, got {refusal_window!r}"
            )
        try:
            kid, public = signer_public(signer_key)
        except ValueError as err:
            raise ConfigurationError(str(err)) from None
        self.app = app
        self.service = service
        self._signer = signer_key
        self._keys = {kid: public}
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self._wal = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
        self._compensate = f"{prefix}/compensate"
        self._status = f"{prefix}/status/"
        self._refusals = _Refusals(refusal_window, clock)
        install()

    @property
    def refused(self) -> int:
        """How many compensation requests this middleware refused since it started."""
        return self._refusals.total

    @property
    def wal(self) -> WAL:
        return self._wal if self._wal is not None else default_wal()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == self._compensate:
            await _reply(send, *(await self._compensation(scope, receive)))
            return
        if path.startswith(self._status):
            await _reply(send, *(await self._status_of(scope, path[len(self._status):])))
            return
        values = [v for k, v in scope.get("headers", ()) if k.lower() == _HEADER_BYTES]
        if not values:
            await self.app(scope, receive, send)
            return
        if len(values) > 1:
            await _reply(send, *_json(400, {"error": "saga-context header refused: it was sent more than once"}))
            return
        try:
            context = parse_saga_context(values[0])
        except SagaContextRefused as err:
            await _reply(send, *_json(400, {"error": str(err)}))
            return
        standing = await asyncio.to_thread(self.ledger.claim, context)
        if standing is not None:
            await _reply(send, *_replay(standing))
            return
        install()  # the propagation hook that carries the scope (again, if a test reset the plugins)
        await self._serve(scope, receive, send, RemoteStep(self.service, context))

    async def _serve(self, scope: Scope, receive: Receive, send: Send, step: RemoteStep) -> None:
        captured = _Captured()
        context = step.context
        tags = {f"caller_saga:{context.saga}", f"caller_step:{context.step}", f"key:{context.key}"}
        try:
            with entered(step):
                async with saga_scope(self.wal, name=f"{self.service} remote step", tags=tags):
                    await self.app(scope, receive, captured.send)
        except Exception as err:  # noqa: BLE001 - the route failed: its part is rolled back, the caller told
            failed = _json(500, {"error": f"the remote step failed and {self.service} rolled back its part: "
                                          f"{type(err).__name__}"})
            await asyncio.to_thread(self.ledger.finish, context.key, "failed", failed[0], "application/json",
                                           failed[2], None)
            await _reply(send, *failed)
            return
        if captured.too_big:
            raise RuntimeError(f"a remote step's response is over {MAX_BODY} bytes; the ledger keeps it whole")
        token = None
        if step.handler is not None:
            token = sign_token(self._signer, self.service, context, step.handler, step.kwargs)
        status = captured.status or 500
        await asyncio.to_thread(self.ledger.finish, context.key, "done", status, captured.content_type,
                                       bytes(captured.body), token)
        headers = list(captured.headers)
        if token is not None:
            headers.append((_TOKEN_BYTES, token.encode()))
        await _reply(send, status, headers, bytes(captured.body))

    async def _status_of(self, scope: Scope, key: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if scope.get("method") != "GET":
            return _json(405, {"error": "GET the status of a key"})
        if len(key) != 32 or any(c not in "0123456789abcdef" for c in key):
            return _json(400, {"error": "the key is 32 lowercase hex characters (the step's idempotency key)"})
        entry = await asyncio.to_thread(self.ledger.fence, key)
        body: dict[str, Any] = {"state": entry.state, "token": entry.token, "status": entry.status,
                                "content_type": entry.content_type,
                                "body": base64.b64encode(entry.body).decode() if entry.body is not None else None}
        if entry.state == "compensated" and entry.token is not None:
            body["receipt"] = sign_receipt(self._signer, self.service, key, entry.token)
        return _json(200, body)

    async def _compensation(self, scope: Scope, receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if scope.get("method") != "POST":
            return _json(405, {"error": "POST the token and the key to compensate"})
        raw = await _read(receive, _MAX_REQUEST)
        if raw is None:
            return _json(413, {"error": f"a compensation request is at most {_MAX_REQUEST} bytes"})
        try:
            request = json.loads(raw)
        except ValueError:
            request = None
        if not isinstance(request, dict) or set(request) != {"token", "key"} or not isinstance(request["key"], str) \
                or len(request["key"]) > 64:
            return _json(400, {"error": 'a compensation request is {"token": <token>, "key": <idempotency key>}'})
        token = request["token"]
        try:
            claims = verify_token(token, self._keys)
            if claims.service != self.service:
                raise TokenRefused("compensation token refused: it is for another service")
        except TokenRefused as err:
            await asyncio.to_thread(self._refuse, str(err), token)
            return _json(403, {"error": str(err)})
        key = claims.context.key
        entry = await asyncio.to_thread(self.ledger.get, key)
        if entry is None or entry.token != token:
            why = "compensation token refused: it is not the token this service issued for its key"
            await asyncio.to_thread(self._refuse, why, token)
            return _json(403, {"error": why})
        receipt = sign_receipt(self._signer, self.service, key, token)
        if entry.state == "compensated":
            return _json(200, {"state": "compensated", "first": False, "receipt": receipt})
        if not await asyncio.to_thread(self.ledger.begin_undo, key):
            return _json(409, {"error": "an undo for this key is running (or was interrupted); ask again later"})
        try:
            await asyncio.to_thread(self._undo, claims.handler, dict(claims.kwargs), request["key"], key)
        except Exception as err:  # noqa: BLE001 - the caller retries; the ledger is back at done
            await asyncio.to_thread(self.ledger.end_undo, key, False)
            return _json(502, {"error": f"the undo failed: {type(err).__name__}"})
        await asyncio.to_thread(self.ledger.end_undo, key, True)
        return _json(200, {"state": "compensated", "first": True, "receipt": receipt})

    def _undo(self, handler: str, kwargs: dict[str, Any], undo_key: str, key: str) -> None:
        """Run the undo as a step of a saga of this service's log (it says what ran, and when)."""
        fn = resolve(handler)
        with saga_scope(self.wal, name=f"{self.service} compensation", tags={f"key:{key}"}) as saga:
            saga.execute(tool=handler, forward=lambda idempotency_key: _call(fn, kwargs, undo_key),
                         semantics=ActionSemantics.IRREVERSIBLE, args=kwargs, inline=True)

    def _refuse(self, why: str, token: object) -> None:
        """Count a refused compensation request; the log hears of it at most once per window."""
        due = self._refusals.count()
        if due:
            digest = token_digest(token) if isinstance(token, str) else None
            ticket = self.wal.append(R.COMPENSATIONS_REFUSED.value, AUDIT_SAGA, {
                "service": self.service, "refused": due, "window_seconds": self._refusals.window,
                "rule": "compensation-token", "reason": why, "presented_sha256": digest,
            }, None)
            self.wal.barrier(ticket)


class _Refusals:
    """Refused compensation requests, counted; one log record per window carries the count.

    The first refusal after ``window`` seconds without a record is written at once, with the
    number refused since the previous record (itself included); the ones in between are only
    counted. A process that stops loses the count since its last record (``refused`` on the
    middleware says it while it runs).
    """

    def __init__(self, window: float, clock: Callable[[], float]) -> None:
        self.window = float(window)
        self.total = 0
        self._clock = clock
        self._since = 0  # refused since the last record
        self._last: float | None = None  # when the last record was written
        self._lock = threading.Lock()

    def count(self) -> int:
        """Count one refusal; how many the record to write now carries (0: none is due)."""
        with self._lock:
            self.total += 1
            self._since += 1
            now = self._clock()
            if self._last is not None and now - self._last < self.window:
                return 0
            due, self._since, self._last = self._since, 0, now
            return due


def _call(fn: Callable[..., Any], kwargs: dict[str, Any], undo_key: str) -> Any:
    try:
        takes_key = "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_key = False
    return fn(**kwargs, idempotency_key=undo_key) if takes_key else fn(**kwargs)


def _replay(entry: Entry) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    if entry.state in ("done", "failed", "compensating", "compensated") and entry.status is not None:
        headers = [(b"content-type", entry.content_type.encode())] if entry.content_type else []
        if entry.token is not None:
            headers.append((_TOKEN_BYTES, entry.token.encode()))
        return entry.status, headers, entry.body or b""
    if entry.state == "fenced":
        return _json(409, {"error": "this key was reported as never run (a status question fenced it); use a new step"})
    return _json(409, {"error": "a request with this key is being served; ask its status"})


async def _read(receive: Receive, limit: int) -> bytes | None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _reply(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Captured:
    """The route's response, held until the token is signed (it goes in a header)."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.content_type: str | None = None
        self.body = bytearray()
        self.too_big = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            for name, value in message.get("headers", ()):
                lower = bytes(name).lower()
                if lower == b"content-type":
                    self.content_type = bytes(value).decode("latin-1")
                if lower not in (b"content-length", _TOKEN_BYTES):  # recomputed; the token is ours alone
                    self.headers.append((bytes(name), bytes(value)))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")
            if len(self.body) > MAX_BODY:
                self.too_big = True
                self.body.clear()
