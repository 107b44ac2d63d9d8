"""The proxy's message handling, apart from any pipe: lines in, lines out.

:class:`ProxyCore` is fed every line the client sends (``from_client``) and every line
the server sends (``from_server``) and writes lines through two callbacks. It interprets
exactly two methods:

* ``tools/list`` results: read to learn the tool surface (observe: build the skeleton;
  enforce: check the policy against it; ``--boundary explicit``: add the saga tools).
* ``tools/call`` requests: a declared tool runs as a saga step, the request forwarded and
  its response held until the step's outcome is in the log; an undeclared one is answered
  with a JSON-RPC error and never reaches the server.

Everything else is forwarded. In both directions what goes out is the proxy's own encoding
of the value it parsed (:mod:`agent_saga_mcp.wire`), never the bytes that came in, so the
peer reads exactly the message the proxy judged. What is *not* forwarded, and why: a client
line the proxy will not stand behind (not UTF-8 JSON, a CR inside it, a duplicated key:
see :func:`~agent_saga_mcp.wire.read_client_line`) is answered with the standard JSON-RPC
error; a ``tools/call`` without an ``id`` (a notification cannot return a result, and a
server might still act on it) is dropped; a batch that carries a ``tools/call`` or
``tools/list`` is split and its members handled one by one (their responses come back
unbatched); a server line that is not JSON is dropped and noted. Every ``tools/call`` the
proxy does not forward is recorded in the log (``Saga.refuse``: a ``STEP_REFUSED`` record).

Transactions are the core's :class:`~agent_saga.Boundary` (see
:mod:`agent_saga_mcp.transaction`): with ``--boundary session`` or ``explicit`` one boundary
is entered when the first call needs it and left at EOF (commit) or by ``saga_rollback``;
with ``none`` every call has a boundary of its own, left (committed) once the call settles.
A call belongs to the transaction current when it was received; ``saga_commit`` and
``saga_rollback`` end the transaction current when they are received, once its calls have
reached its saga, and the saga's end waits for the calls still in flight within its
``rollback_grace`` (``--rollback-grace``): one still running then is left in flight, and
settled (undone, for a rollback) as its answer arrives.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_saga import WAL, Boundary, GatePort, NotApplied, Saga, SagaClosed, StepRefused, default_wal
from agent_saga.adapter import SagaKwargs
from agent_saga.plugins import PolicyError, ToolNotClassified, ToolPolicy
from agent_saga.plugins.policy import ToolRule
from agent_saga_mcp.compat import ToolInfo, call_params, is_error_result, list_tools_result, validate_message
from agent_saga_mcp.handler import add_route, remove_route
from agent_saga_mcp.policy import ORIGIN, McpPolicy
from agent_saga_mcp.transaction import Transaction
from agent_saga_mcp.wire import LineRefused, encode, read_client_line, read_server_line, tool_calls_in

__all__ = [
    "COMMIT_TOOL",
    "ROLLBACK_TOOL",
    "BoundaryMode",
    "CallCancelled",
    "ErrorCode",
    "ProxyConfig",
    "ProxyCore",
    "ServerGone",
    "ToolCallFailed",
    "merge_skeleton",
]

Send = Callable[[bytes], Awaitable[None]]

COMMIT_TOOL = "saga_commit"
ROLLBACK_TOOL = "saga_rollback"
_OWN_PREFIX = "agent-saga:"
_METHODS_OF_INTEREST = ("tools/call", "tools/list")


class BoundaryMode(enum.StrEnum):
    """Where a transaction of the proxy ends (``--boundary``)."""

    SESSION = "session"
    EXPLICIT = "explicit"
    NONE = "none"


class ErrorCode(enum.IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    INVALID_PARAMS = -32602
    TOOL_NOT_DECLARED = -32001
    STEP_REFUSED = -32002
    PROXY_ERROR = -32003


class ToolCallFailed(Exception):
    """The server answered a tools/call with an error result or a JSON-RPC error."""


class ServerGone(ConnectionError):
    """The server closed its output before answering."""


class CallCancelled(Exception):
    """The client cancelled a tools/call in flight (``notifications/cancelled``): no answer is due."""


def _id_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _in_use(id_: Any) -> str:
    return (f"request id {id_!r} is already in use by a request in flight (or reserved for the proxy's own "
            "requests); give every request an id of its own")


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _text_result(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


_SAGA_TOOLS: list[dict[str, Any]] = [
    {
        "name": COMMIT_TOOL,
        "description": "Commit the current transaction: every tool call since the last commit or "
        "rollback stays done.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": ROLLBACK_TOOL,
        "description": "Roll back the current transaction: undo every tool call since the last "
        "commit or rollback, newest first.",
        "inputSchema": {
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "why the work is being undone"}},
        },
    },
]


def merge_skeleton(existing: Mapping[str, Any] | None, names: list[str]) -> dict[str, Any]:
    """``existing`` with every new name added IRREVERSIBLE + TODO; reviewed entries untouched."""
    merged: dict[str, Any] = dict(existing or ToolPolicy.skeleton([]))
    tools = dict(merged.get("tools") or {})
    known = ToolPolicy.from_dict({"tools": tools}) if tools else ToolPolicy()
    fresh = [n for n in names if n not in tools and known.rule_for(n) is None]
    tools.update(ToolPolicy.skeleton(fresh)["tools"])
    merged["tools"] = tools
    return merged


@dataclass
class ProxyConfig:
    """How one proxy session behaves. ``policy=None`` is observe mode.

    ``server`` is how the proxy starts its server (``{"command": [...], "cwd": ...}``, given
    by whoever starts the proxy); ``server_name`` is what the log records with each
    compensating tool call: the server's name in the recovery host's
    ``/etc/agent-saga/mcp-servers.json`` (None: the undo can run only in this process).
    ``wal=None`` is the default log and ``gate=None`` the default gate (the kill switch),
    as for any boundary.
    """

    server: dict[str, Any]
    server_name: str | None = None
    policy: McpPolicy | None = None
    boundary: BoundaryMode = BoundaryMode.SESSION
    emit_policy: Path | None = None
    wal: WAL | None = None
    gate: GatePort | None = None
    name: str = "mcp"
    tags: frozenset[str] = field(default_factory=frozenset)
    #: How long a transaction's end waits for its calls in flight (None: the saga option's default).
    rollback_grace: float | None = None


class ProxyCore:
    """The message-handling core (see the module doc). Not thread-safe: one event loop."""

    def __init__(
        self,
        config: ProxyConfig,
        to_server: Send,
        to_client: Send,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self._to_server = to_server
        self._to_client = to_client
        self._note = note or (lambda text: print(f"agent-saga mcp: {text}", file=sys.stderr, flush=True))
        self.fatal: str | None = None
        self.stopped = asyncio.Event()
        self._session: Transaction | None = None  # the open transaction (session, explicit)
        self.sagas: list[Saga] = []  # every saga this proxy opened, oldest first
        self.observed: dict[str, ToolInfo | None] = {}
        self.surface: dict[str, ToolInfo] | None = None
        self._surface_pages: dict[str, ToolInfo] = {}
        self._lists: set[str] = set()  # ids of the client's pending tools/list requests
        # A declared tools/call reaches the server under an id of the proxy's own (never reused,
        # never a client's), so only the server's answer to *that* request can settle its step:
        # an answer to anything else the client sent, whatever id it reuses, cannot.
        self._calls: dict[str, asyncio.Future[dict[str, Any]]] = {}  # by the id the server sees
        self._call_ids: dict[str, str] = {}  # the client's id -> the id the server sees
        self._own: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._own_seq = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._boundary_lock = asyncio.Lock()
        self._saga_lock = asyncio.Lock()
        self._surface_lock = asyncio.Lock()
        self._emitted: dict[str, Any] | None = None
        if config.policy is None and config.emit_policy is not None and config.emit_policy.exists():
            # Refuse a broken file up front rather than overwrite a reviewer's work later.
            ToolPolicy.from_file(config.emit_policy)
            self._emitted = json.loads(config.emit_policy.read_text("utf-8"))

    # -- small helpers ----------------------------------------------------------------

    @property
    def observing(self) -> bool:
        return self.config.policy is None

    async def _reply_error(self, id_: Any, code: ErrorCode, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": int(code), "message": message}
        if data is not None:
            error["data"] = data
        await self._send_client({"jsonrpc": "2.0", "id": id_ if _valid_id(id_) else None, "error": error})

    async def _reply_result(self, id_: Any, result: Mapping[str, Any]) -> None:
        await self._send_client({"jsonrpc": "2.0", "id": id_, "result": dict(result)})

    # Only these two write to the peers: what goes out is always the proxy's own encoding
    # of a value it holds, one message per line (see agent_saga_mcp.wire).

    async def _send_server(self, message: Any) -> None:
        await self._to_server(encode(message) + b"\n")

    async def _send_client(self, message: Any) -> None:
        await self._to_client(encode(message) + b"\n")

    def _fail(self, message: str) -> None:
        # The caller answers the pending request first, then sets ``stopped``: stopping
        # before the answer is written would close the pipes on it.
        if self.fatal is None:
            self.fatal = message
            self._note(message)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every tool call in flight to settle."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- client -> server -------------------------------------------------------------

    async def from_client(self, line: bytes) -> None:
        """Handle one line from the client (without its newline)."""
        if not line.strip():
            return
        try:
            message = read_client_line(line)
        except LineRefused as refused:
            await self._refuse_calls(tool_calls_in(line), refused.message, "mcp.line")
            await self._reply_error(refused.id, ErrorCode(refused.code), refused.message)
            return
        if isinstance(message, list) and not any(
            isinstance(m, dict) and (m.get("method") in _METHODS_OF_INTEREST or self._taken(m)) for m in message
        ):
            await self._send_server(message)
            return
        for member in message if isinstance(message, list) else [message]:
            await self._client_message(member)

    async def _client_message(self, message: Any) -> None:
        if not isinstance(message, dict):
            await self._reply_error(None, ErrorCode.INVALID_REQUEST, "a message must be a JSON object")
            return
        method = message.get("method")
        if method == "tools/call":
            await self._client_call(message)
            return
        if self._taken(message):
            await self._reply_error(message["id"], ErrorCode.INVALID_REQUEST, _in_use(message["id"]))
            return
        if method == "tools/list" and _valid_id(message.get("id")):
            self._lists.add(_id_key(message["id"]))
        pending = None
        if method == "notifications/cancelled":
            # The server knows a held call by the proxy's id for it: cancel that one.
            params = message.get("params")
            request = params.get("requestId") if isinstance(params, dict) else None
            wire = self._call_ids.get(_id_key(request)) if _valid_id(request) else None
            if wire is not None and isinstance(params, dict):
                pending = self._calls.get(wire)
                message = {**message, "params": {**params, "requestId": json.loads(wire)}}
        await self._send_server(message)
        if pending is not None and not pending.done():
            # The server will not answer a cancelled request, so its step would wait forever;
            # whether the tool ran is unknown, which is what the step records.
            pending.set_exception(CallCancelled(f"the client cancelled request {request!r}"))

    async def _client_call(self, message: dict[str, Any]) -> None:
        id_ = message.get("id")
        if "id" not in message:
            await self._refuse_request(
                message, None, "a tools/call sent as a notification (no id) could not return a result")
            return
        try:
            validate_message(message)
            if not _valid_id(id_):
                raise ValueError("id must be a string or an integer")
        except (ValidationError, ValueError) as err:
            await self._refuse_request(message, ErrorCode.INVALID_REQUEST, f"invalid tools/call request: {_short(err)}")
            return
        try:
            name, arguments = call_params(message.get("params"))
        except ValidationError as err:
            await self._refuse_request(message, ErrorCode.INVALID_PARAMS, f"invalid tools/call params: {_short(err)}")
            return
        key = _id_key(id_)
        if self._taken(message):
            await self._refuse_request(message, ErrorCode.INVALID_REQUEST, _in_use(id_))
            return
        if self.observing:
            self._observe([name], None)
            await self._send_server(message)
            return
        policy = self.config.policy
        assert policy is not None
        if self.config.boundary is BoundaryMode.EXPLICIT and name in (COMMIT_TOOL, ROLLBACK_TOOL):
            # It ends the transaction current now: a call received after it belongs to the next one.
            ending, self._session = self._session, None
            self._spawn(self._explicit(id_, name, arguments, ending))
            return
        rule = policy.rule_for(name)
        if rule is None:
            if policy.enforce:
                await self._refuse(ToolNotClassified(name, "MCP proxy"), arguments)
                await self._reply_error(
                    id_, ErrorCode.TOOL_NOT_DECLARED,
                    f"tool {name!r} is not declared in the tool policy {policy.policy.source}, so it was not "
                    "called; add it to the policy with its semantics (REVERSIBLE, COMPENSABLE or IRREVERSIBLE)",
                    {"tool": name},
                )
                return
            self._note(f"tool {name!r} is not in the policy (observe mode): forwarded without a saga step")
            await self._send_server(message)
            return
        wire_id = self._own_id()
        wire = self._call_ids[key] = _id_key(wire_id)
        self._calls[wire] = asyncio.get_running_loop().create_future()
        transaction = self._current()  # the call's, whichever task runs it and whatever is received next
        arrival = transaction.expect() if transaction is not None else None
        self._spawn(self._step(id_, key, {**message, "id": wire_id}, name, arguments, rule, transaction, arrival))

    def _taken(self, message: Mapping[str, Any]) -> bool:
        """Whether ``message`` is a request whose id a request in flight holds, or the proxy reserves.

        JSON-RPC ties an answer to its request by id alone, so a second request under the id
        of one in flight could have its answer taken for the first one's.
        """
        id_ = message.get("id")
        if "method" not in message or not _valid_id(id_):
            return False
        key = _id_key(id_)
        return key in self._call_ids or key in self._lists or (isinstance(id_, str) and id_.startswith(_OWN_PREFIX))

    def _own_id(self) -> str:
        """A request id of the proxy's own: never a client's (they may not use the prefix), never reused."""
        self._own_seq += 1
        return f"{_OWN_PREFIX}{os.getpid()}:{self._own_seq}"

    async def _refuse_request(self, message: dict[str, Any], code: ErrorCode | None, reason: str) -> None:
        """A malformed tools/call: on record, and answered with ``code`` (None: a notification, dropped)."""
        await self._refuse_calls([message], reason, "mcp.request")
        if code is None:
            self._note(f"dropped {reason}")
        else:
            await self._reply_error(message.get("id"), code, reason)

    async def _refuse_calls(self, calls: list[dict[str, Any]], reason: str, rule: str) -> None:
        """Record each tools/call the proxy will not forward as a refused step (enforce only)."""
        for call in calls:
            params = call.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str) and name:  # a call that names no tool could not run anything
                arguments = params.get("arguments") if isinstance(params, dict) else None
                await self._refuse(StepRefused(name, reason, rule), arguments if isinstance(arguments, dict) else {})

    async def _refuse(self, refused: StepRefused, arguments: Mapping[str, Any]) -> None:
        if self.observing:
            return  # observe mode writes no log
        try:
            saga, single = await self._saga_for_call()
            try:
                saga.refuse(refused.tool, arguments, refused, origin=ORIGIN)
            finally:
                if single is not None:
                    await single.commit()
        except Exception as err:  # noqa: BLE001 - the call stays refused; only its record is missing
            self._note(f"could not record the refused call of {refused.tool!r}: {type(err).__name__}: {err}")

    async def _step(
        self, id_: Any, key: str, message: dict[str, Any], name: str, arguments: dict[str, Any], rule: ToolRule,
        transaction: Transaction | None, arrival: asyncio.Future[None] | None,
    ) -> None:
        """One declared call, in ``transaction`` (the one current when it was received; None: its own)."""
        policy = self.config.policy
        assert policy is not None
        wire = self._call_ids[key]
        future = self._calls[wire]
        try:
            if not await self._check_surface():
                await self._reply_error(id_, ErrorCode.PROXY_ERROR, self.fatal or "tool policy check failed")
                self.stopped.set()
                return

            async def forward() -> dict[str, Any]:
                await self._send_server(message)
                response = await future
                if "error" in response:
                    raise ToolCallFailed(f"{name}: JSON-RPC error {response['error']!r}")
                result = response.get("result")
                if not isinstance(result, dict):
                    raise ToolCallFailed(f"{name}: response has no result object")
                if is_error_result(result):
                    # The tool said it failed; whether it changed anything first is not known.
                    raise ToolCallFailed(f"{name} returned an error result")
                return result

            try:
                undo = policy.undo(name, rule, arguments, self.config.server_name)
            except StepRefused as refused:  # its undo could not be built: never made, and on record
                await self._refuse(refused, arguments)
                raise
            saga, single = await self._saga_for_call(transaction)
            try:
                # Its step opens in this same run of the task (before anything else runs on the
                # loop), so the transaction's end, woken by the arrival, finds it in the saga.
                _arrive(arrival)
                await saga.execute(tool=name, forward=forward, args=arguments, options=policy.step_options(rule, undo))
            finally:
                if single is not None:
                    await single.commit()
        except StepRefused as refused:
            await self._reply_error(id_, ErrorCode.STEP_REFUSED, str(refused), {"tool": name, "rule": refused.rule})
            return
        except SagaClosed as closed:
            # The transaction ended while the call was in flight, and its outcome was settled as it
            # landed (a booking undone): the server's answer would tell of an effect that is gone.
            await self._reply_error(id_, ErrorCode.PROXY_ERROR, f"{name}: {closed}", {"tool": name})
            return
        except Exception as err:  # noqa: BLE001 - answered to the client below, never swallowed silently
            if isinstance(err, CallCancelled):
                return  # a cancelled request gets no answer (MCP's cancellation rule)
            if not _answered(future):
                kind = ErrorCode.STEP_REFUSED if isinstance(err, NotApplied) else ErrorCode.PROXY_ERROR
                await self._reply_error(id_, kind, f"{name}: {type(err).__name__}: {err}", {"tool": name})
                return
            if not isinstance(err, ToolCallFailed):
                self._note(f"{name}: {type(err).__name__}: {err}")
        finally:
            _arrive(arrival)
            self._calls.pop(wire, None)
            self._call_ids.pop(key, None)
            if not future.done():
                future.cancel()
        if _answered(future):
            response = future.result()
            try:
                # The client must not see an effect whose undo could still be lost: the
                # step's outcome (and its compensation) is durable before the answer goes out.
                await self._wal().barrier_async()
            except Exception as err:  # noqa: BLE001 - the effect happened; the client still hears of it
                self._note(f"{name}: the log could not confirm the step's outcome: {type(err).__name__}: {err}")
            await self._send_client({**response, "id": id_})  # the client's id back on the server's answer

    def _current(self) -> Transaction | None:
        """The transaction a call received now belongs to (``none``: each call has its own, None here)."""
        if self.config.boundary is BoundaryMode.NONE:
            return None
        if self._session is None or (self._session.saga is not None and not self._session.is_open):
            self._session = self._transaction()
        return self._session

    async def _saga_for_call(
        self, transaction: Transaction | None = None
    ) -> tuple[Saga, Transaction | None]:
        """The saga a call runs in, and the transaction to commit once it settles (``none``: its own).

        ``transaction``: the one the call was received in (default: the current one).
        """
        if self.config.boundary is BoundaryMode.NONE:
            single = self._transaction()
            return await self._open(single), single
        async with self._saga_lock:
            session = transaction or self._current()
            assert session is not None
            if session.saga is None:
                await self._open(session)
            assert session.saga is not None
            return session.saga, None

    def _transaction(self) -> Transaction:
        config = self.config
        options: SagaKwargs = {"name": config.name, "gate": config.gate, "tags": config.tags}
        if config.rollback_grace is not None:
            options["rollback_grace"] = config.rollback_grace
        return Transaction(Boundary(self._wal(), **options))

    async def _open(self, transaction: Transaction) -> Saga:
        saga = await transaction.open()
        self.sagas.append(saga)
        return saga

    def _wal(self) -> WAL:
        if self.config.wal is None:
            self.config.wal = default_wal()
        return self.config.wal

    async def _explicit(self, id_: Any, name: str, arguments: dict[str, Any], session: Transaction | None) -> None:
        """``saga_commit`` / ``saga_rollback`` of ``session``, the transaction current when it was received."""
        # One end at a time, in the order received. Each waits until the calls of its transaction
        # have reached the saga; the saga's end then waits for those in flight within its grace
        # (never for another end, which could wait for it in turn).
        async with self._boundary_lock:
            if session is not None:
                await session.arrived()
            if session is None or session.saga is None or not session.is_open:
                await self._reply_result(id_, _text_result("no open transaction: nothing to do"))
                return
            saga = session.saga
            if name == COMMIT_TOOL:
                await session.commit()
                await self._reply_result(id_, _text_result(f"committed {saga.saga_id}: {len(saga.steps)} step(s)"))
                return
            reason = str(arguments.get("reason") or "saga_rollback called")
            report = await session.roll_back(RollbackRequested(reason))
        text = (f"rolled back {saga.saga_id}: {len(report.compensated)} compensated, "
                f"{len(report.failed)} failed, {len(report.orphaned)} orphaned, "
                f"{len(report.unresolved)} unresolved; clean={report.clean}")
        await self._reply_result(id_, _text_result(text, error=not report.clean))

    # -- the tool surface ----------------------------------------------------------------

    async def _check_surface(self) -> bool:
        """Make sure the policy was checked against the server's tools (listing them if needed)."""
        if self.fatal is not None:
            return False
        if self.surface is not None:
            return True
        async with self._surface_lock:
            if self.surface is None and self.fatal is None:
                tools: dict[str, ToolInfo] = {}
                cursor: str | None = None
                while True:
                    try:
                        result = await self.request("tools/list", {"cursor": cursor} if cursor else None)
                        page, cursor = list_tools_result(result)
                    except (ValidationError, ToolCallFailed, ServerGone) as err:
                        self._fail(f"could not list the server's tools to check the policy: {_short(err)}")
                        return False
                    tools.update((t.name, t) for t in page)
                    if cursor is None:
                        break
                self._accept_surface(tools)
        return self.fatal is None

    def _accept_surface(self, tools: dict[str, ToolInfo]) -> None:
        policy = self.config.policy
        if policy is None:
            return
        reserved = (COMMIT_TOOL, ROLLBACK_TOOL) if self.config.boundary is BoundaryMode.EXPLICIT else ()
        try:
            for warning in policy.check_surface(tools, reserved):
                self._note(warning)
        except PolicyError as err:
            self._fail(f"tool policy refused: {err}")
            return
        self.surface = tools

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send the proxy's own request to the server and return its result."""
        id_ = self._own_id()
        key = _id_key(id_)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._own[key] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = dict(params)
        try:
            await self._send_server(message)
            response = await future
        finally:
            self._own.pop(key, None)
        if "error" in response:
            raise ToolCallFailed(f"{method}: JSON-RPC error {response['error']!r}")
        result = response.get("result")
        if not isinstance(result, dict):
            raise ToolCallFailed(f"{method}: response has no result object")
        return result

    async def call_route(self, tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """The live route of the ``mcp.call_tool`` handler: a compensating call on this connection."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        return await self.request("tools/call", params)

    # -- server -> client -----------------------------------------------------------------

    async def from_server(self, line: bytes) -> None:
        """Handle one line from the server (without its newline)."""
        if not line.strip():
            return  # an empty line carries no message, in either direction
        try:
            message = read_server_line(line)
        except (ValueError, RecursionError) as err:
            # Forwarding bytes the proxy could not read would let the client read them as
            # anything, an answer the proxy is still holding included.
            self._note(f"dropped a line from the server that is not JSON ({_short(err)[:80]}): {line[:120]!r}")
            return
        if isinstance(message, list):
            ours = [m for m in message if isinstance(m, dict) and self._is_ours(m)]
            rest = [m for m in message if not (isinstance(m, dict) and self._is_ours(m))]
            if rest or not ours:
                await self._send_client(rest)
            for member in ours:
                await self._server_response(member)
            return
        if isinstance(message, dict) and self._is_ours(message):
            await self._server_response(message)
            return
        if isinstance(message, dict) and message.get("method") == "notifications/tools/list_changed":
            self.surface = None  # check the policy against the new list before the next call
        await self._send_client(message)

    def _is_ours(self, message: dict[str, Any]) -> bool:
        if "method" in message or not ("result" in message or "error" in message):
            return False
        id_ = message.get("id")
        if not _valid_id(id_):
            return False
        key = _id_key(id_)
        return key in self._own or key in self._calls or key in self._lists

    async def _server_response(self, message: dict[str, Any]) -> None:
        key = _id_key(message.get("id"))
        own = self._own.get(key)
        if own is not None:
            if not own.done():
                own.set_result(message)
            return
        call = self._calls.get(key)
        if call is not None:
            if not call.done():
                call.set_result(message)
            return
        self._lists.discard(key)
        result = message.get("result")
        try:
            page, cursor = list_tools_result(result)
        except ValidationError:
            await self._send_client(message)
            return
        if self.observing:
            self._observe([t.name for t in page], page)
            await self._send_client(message)
            return
        self._surface_pages.update((t.name, t) for t in page)
        if cursor is None:
            pages, self._surface_pages = self._surface_pages, {}
            if self.surface is None:
                self._accept_surface(pages)
            if self.fatal is not None:
                await self._reply_error(message.get("id"), ErrorCode.PROXY_ERROR, self.fatal)
                self.stopped.set()
                return
            if self.config.boundary is BoundaryMode.EXPLICIT:
                assert isinstance(result, dict)
                message = {**message, "result": {**result, "tools": [*result.get("tools", []), *_SAGA_TOOLS]}}
        await self._send_client(message)

    # -- observe mode ---------------------------------------------------------------------

    def _observe(self, names: list[str], page: list[ToolInfo] | None) -> None:
        infos = {t.name: t for t in page or []}
        fresh = [n for n in names if n not in self.observed]
        for name in names:
            if self.observed.get(name) is None:
                self.observed[name] = infos.get(name)
        if fresh and self.config.emit_policy is not None:
            self.write_skeleton()

    def write_skeleton(self) -> None:
        """Merge what was seen into the policy file (atomically; reviewed entries untouched)."""
        target = self.config.emit_policy
        if target is None:
            return
        merged = merge_skeleton(self._emitted, sorted(self.observed))
        if merged == self._emitted:
            return
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=2) + "\n", "utf-8")
        os.replace(tmp, target)
        self._emitted = merged

    # -- the end --------------------------------------------------------------------------

    def attach(self) -> None:
        """Route ``mcp.call_tool`` compensations naming this server through this connection."""
        add_route(self.config.server_name, self.call_route)

    def detach(self) -> None:
        remove_route(self.config.server_name, self.call_route)

    async def close(self) -> None:
        """The client closed its side cleanly: settle calls in flight and commit what is open."""
        await self.drain()
        async with self._saga_lock:
            session, self._session = self._session, None
        if session is not None:
            await session.commit()

    def server_gone(self) -> None:
        """The server closed its output: calls waiting for an answer fail (their steps UNKNOWN)."""
        gone = "the server closed the connection before answering"
        for call in self._calls.values():
            if not call.done():
                call.set_exception(ServerGone(gone))
        for own in self._own.values():
            if not own.done():
                own.set_exception(ServerGone(gone))


class RollbackRequested(Exception):
    """The cause recorded when the client calls ``saga_rollback``."""


def _arrive(arrival: asyncio.Future[None] | None) -> None:
    """A call has reached its transaction's saga, or ended before it (see ``Transaction.expect``)."""
    if arrival is not None and not arrival.done():
        arrival.set_result(None)


def _answered(future: asyncio.Future[Any]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _short(err: BaseException) -> str:
    text = str(err).replace("\n", " ")
    return text[:300]
