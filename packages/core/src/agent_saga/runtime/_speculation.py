"""Predictive pre-execution: run the agent's likely next reads while its model thinks.

A :class:`Speculator` is attached to one saga (``with Speculator(tools, intent=...)``
inside the saga's boundary). After each call the agent makes, its :class:`Predictor`
names the calls likely to come next, and adapters may name the calls a framework has
already planned (:func:`planned_calls`: the parallel tool calls of one model response). Each
named call is run at once, on the speculator's own worker threads, only when:

* the tool is one the speculator was given, declared REVERSIBLE;
* its arguments are plain JSON (so that its lease can bind them exactly);
* the saga's gate allows it (``check_speculation``: REVERSIBLE only, a kill switch
  that lets it run, no open breaker, no rule that blocks it or asks a person, no
  budget to spend); a gate without that check speculates nothing (fail closed);
* the saga was not stopped.

Its result is held behind a :class:`~agent_saga.runtime.SpeculationLease` (an HMAC under
a key only this speculator holds) bound to the intent, the saga, the tool, the
digest of the canonical arguments and an expiry. When the agent makes that very call
before the lease expires, the step runs through the engine as every step does (the
gate's full check, the log, the undo stack), but its forward call is the held result
instead of a second call; a SPECULATION_REDEEMED record names the lease under the
step. A lease that is stale, forged, altered, or for another intent, saga, tool or
arguments is never redeemed: the call runs for real.

A held result never shows what the saga itself wrote after the guess began running: when a
non-REVERSIBLE step of the saga has landed since (COMMITTED, or UNKNOWN: it may have), whether it
began before the guess or after, the guess is dropped and the agent's call runs for real. The
saga's steps are read (``Saga.steps``), so a step run by ``saga.execute`` counts as one run by a
wrapped tool. ``touches=`` names the resources each tool reads or writes; with it, only guesses
whose resources overlap the write's are dropped (see :class:`Speculator`). A write still in flight
when the agent's call runs is concurrent with it, and does not drop the guess.

A speculation never redeemed is wasted: it is dropped when its lease expires, when
the intent changes (:meth:`Speculator.set_intent`), when the saga wrote over it (above)
and when the speculator closes.
REVERSIBLE means undone in-process or nothing to undo: when the tool declares an
undo (``compensate=`` or an ``@inverse_of`` pairing), a dropped speculation's undo is
called with the speculative result; otherwise nothing is done. Wasted speculations
are counted in :attr:`Speculator.stats`, not written to the log: nothing of them is
left for anyone to repair.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any

from agent_saga.context import current_saga
from agent_saga.credentials import resolve_credentials
from agent_saga.engine.invoke import accepts_idempotency_key
from agent_saga.engine.ports import StepRequest
from agent_saga.engine.saga import Saga
from agent_saga.engine.state import SagaStatus, Step
from agent_saga.engine.tagged import untag, untag_call
from agent_saga.engine.undo import build, undo_for
from agent_saga.errors import ConfigurationError, StepRefused
from agent_saga.log.encodable import encodable
from agent_saga.log.records import RecordType
from agent_saga.redaction import redact_args
from agent_saga.registry import inverse_for, resolve
from agent_saga.runtime._predictors import Prediction, Predictor
from agent_saga.runtime._speculation_leases import LeaseSigner, SpeculationLease, args_digest
from agent_saga.runtime._tiers import ToolCall
from agent_saga.semantics import ActionSemantics, StepState
from agent_saga.toolspec import SPEC_ATTR, ToolSpec

__all__ = ["SpeculationStats", "Speculator", "planned_calls"]

_REVERSIBLE = ActionSemantics.REVERSIBLE
_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE
#: A call a framework planned: a prediction, a model's ToolCall, or ``(tool, args)``.
Planned = Prediction | ToolCall | tuple[str, Mapping[str, Any]]
#: What ``touches=`` maps a tool's name to: its resource keys, or a function of the call's arguments giving them.
Touches = Mapping[str, Collection[str] | Callable[[Mapping[str, Any]], Iterable[str]]]
_KEY = "idempotency_key"
#: Step states in which nothing landed (yet): every other state may have changed what a guess read.
_NOT_LANDED = (StepState.PENDING, StepState.NOT_APPLIED)
_STALE = "the saga wrote after it began"


@dataclass(slots=True)
class SpeculationStats:
    """What a speculator did: calls run ahead, redeemed, wasted, refused, and wasted ones undone."""

    started: int = 0
    redeemed: int = 0
    wasted: int = 0
    refused: int = 0
    undone: int = 0
    undo_failed: int = 0
    #: Why each refusal and waste happened, counted by reason (one line each).
    reasons: dict[str, int] = field(default_factory=dict)

    def _count(self, what: str, reason: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


class _Began:
    """What the saga had written when a guess began running, set by its worker just before the call.

    ``count``: the saga's steps then (-1 until the guess begins); ``running``: those of them that
    could still land (non-REVERSIBLE, PENDING). A write among neither landed before the guess read.
    """

    __slots__ = ("count", "running")

    def __init__(self) -> None:
        self.count = -1
        self.running: tuple[Step, ...] = ()

    def mark(self, steps: tuple[Step, ...]) -> None:
        self.running = tuple(s for s in steps if s.semantics is not _REVERSIBLE and s.state is StepState.PENDING)
        self.count = len(steps)  # last: a reader that sees the count sees the running steps


@dataclass(slots=True)
class _Held:
    lease: SpeculationLease
    spec: ToolSpec
    fn: Callable[..., Any]
    future: concurrent.futures.Future[Any]
    issued: float
    keys: frozenset[str] | None  # the resources the guess reads (touches=); None: every resource
    began: _Began


@dataclass(slots=True)
class _Use:
    """What became of a held result at the agent's call: the step it served (its operation id), or why not."""

    op: str | None = None
    why: str = "the agent's call did not use it"  # the forward never ran: the gate refused the call


class Speculator:
    """Run predicted REVERSIBLE calls ahead of the agent, and redeem them by lease.

    ``tools``: the tools it may run (each made a step by ``@tool`` or ``AgentKit.safe_tool``);
    ``intent``: what the agent is working on now (a request or turn id, see
    :meth:`set_intent`); ``predictor``: None to run only what adapters plan; ``ttl``:
    seconds a held result may be redeemed; ``workers``: speculative calls at once;
    ``close_wait``: seconds :meth:`close` waits for guesses still running; ``clock``: the
    monotonic clock leases expire by.

    ``touches``: the resources each tool reads or writes, by tool name: a collection of keys
    (``{"read_rates": {"fx"}}``) or a function of the call's arguments returning them
    (``{"transfer": lambda a: [a["source"], a["target"]]}``). A write of the saga then drops only
    the guesses whose keys overlap its own. A tool not named (on either side), a function that
    fails or returns anything but strings, and a function-keyed write the speculator did not see
    the arguments of (run by ``saga.execute``, or a fallback) touch every resource. None: every
    landed write drops every guess.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any]],
        *,
        intent: str,
        predictor: Predictor | None = None,
        ttl: float = 30.0,
        workers: int = 2,
        close_wait: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        touches: Touches | None = None,
    ) -> None:
        _check_intent(intent)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < float("inf"):
            raise ConfigurationError(f"Speculator(ttl=...) is seconds a held result stays redeemable (> 0), got {ttl!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigurationError(f"Speculator(workers=...) is how many speculative calls run at once (>= 1), got {workers!r}")
        if isinstance(close_wait, bool) or not isinstance(close_wait, (int, float)) or not 0 <= close_wait < float("inf"):
            raise ConfigurationError(
                f"Speculator(close_wait=...) is seconds close() waits for guesses still running (>= 0), got {close_wait!r}"
            )
        if predictor is not None and not isinstance(predictor, Predictor):
            raise ConfigurationError(
                f"Speculator(predictor=...) takes an object with observe(tool, args) and predict(), got {predictor!r}"
            )
        self._tools: dict[str, tuple[ToolSpec, Callable[..., Any]]] = {}
        for wrapped in tools:
            spec = getattr(wrapped, SPEC_ATTR, None)
            if not isinstance(spec, ToolSpec):
                raise ConfigurationError(
                    f"Speculator(tools=...) takes tools made steps by @tool or AgentKit.safe_tool, got {wrapped!r}"
                )
            # The function the wrapper wraps (one level: the user's own decorators stay on).
            self._tools[spec.name] = (spec, getattr(wrapped, "__wrapped__", wrapped))
        self.intent = intent
        self.predictor = predictor
        self.ttl = float(ttl)
        self.close_wait = float(close_wait)
        self.stats = SpeculationStats()
        self._clock = clock
        self._keeper = LeaseSigner(clock=clock)
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}  # by lease id
        self._by_call: dict[tuple[str, str], str] = {}  # (tool, args digest) -> lease id
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="agent-saga-speculate")
        self._saga: Saga | None = None
        self._closed = False
        self._touches = _checked_touches(touches)
        # The resources of the writes made through this speculator whose keys depend on their
        # arguments, by the step's operation id (the key the engine hands the forward).
        self._wrote: dict[str, frozenset[str] | None] = {}

    def __repr__(self) -> str:
        return (
            f"Speculator(tools={sorted(self._tools)}, predictor={self.predictor!r}, ttl={self.ttl:g}, "
            f"held={len(self._held)})"
        )

    # -- attaching to the saga ---------------------------------------------------------

    def attach(self, saga: Any = None) -> Speculator:
        """Attach to ``saga`` (default: the current one); every tool call in it then comes here first."""
        target = getattr(saga, "saga", saga) if saga is not None else current_saga()  # a SyncSaga's Saga
        if not isinstance(target, Saga):
            raise ConfigurationError(
                "a Speculator is attached inside a saga: `with saga_scope(): with Speculator(...):`, or pass saga="
            )
        if target.speculation is not None and target.speculation is not self:
            raise ConfigurationError(f"saga {target.saga_id} already has a Speculator attached; close that one first")
        if self._closed:
            raise ConfigurationError("this Speculator was closed; make a new one")
        if self._saga is not None and self._saga is not target:
            # its held results were run for that saga (and their leases name it): one saga each
            raise ConfigurationError(f"this Speculator serves saga {self._saga.saga_id}; make one per saga")
        self._saga = target
        target.speculation = self
        return self

    def close(self) -> None:
        """Detach, and drop every held speculation (undoing those whose tool declares an undo)."""
        with self._lock:
            self._closed = True
            saga, self._saga = self._saga, None
            dropped = list(self._held.values())
            self._held.clear()
            self._by_call.clear()
        if saga is not None and saga.speculation is self:
            saga.speculation = None
        for held in dropped:
            self._waste(held, "never asked for")
        # Guesses still running are waited for (their undo runs as each ends), but a tool that
        # hangs must not hold the saga's end: past close_wait it is left to finish on its thread.
        running = [h.future for h in dropped if not h.future.done()]
        _, late = concurrent.futures.wait(running, timeout=self.close_wait)
        if late:
            self.stats.reasons["still running at close"] = len(late)
        self._pool.shutdown(wait=not late)

    def __enter__(self) -> Speculator:
        return self.attach()

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> Speculator:
        return self.attach()

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)  # close waits for calls in flight: not on the loop

    def set_intent(self, intent: str) -> None:
        """The agent moved on to ``intent``: speculations made for another intent are dropped."""
        _check_intent(intent)
        with self._lock:
            self.intent = intent
            stale = [h for h in self._held.values() if h.lease.intent != intent]
            for held in stale:
                self._forget(held)
        for held in stale:
            self._waste(held, "the intent changed")

    # -- running ahead -----------------------------------------------------------------

    def plan(self, calls: Iterable[Planned]) -> list[SpeculationLease]:
        """Run these calls ahead (a framework's planned tool calls); the leases of those that started."""
        leases = []
        for call in calls:
            if isinstance(call, Prediction):
                tool, args = call.tool, call.args
            elif isinstance(call, ToolCall):
                if call.raw_arguments and not call.arguments:
                    continue  # the model's JSON did not parse: there is no call to guess
                tool, args = call.name, call.arguments
            elif isinstance(call, tuple) and len(call) == 2:
                tool, args = call
            else:
                raise TypeError(f"plan() takes Prediction(tool, args), ToolCall or (tool, args) pairs, got {call!r}")
            lease = self.speculate(tool, args)
            if lease is not None:
                leases.append(lease)
        return leases

    def speculate(self, tool: str, args: Mapping[str, Any]) -> SpeculationLease | None:
        """Run ``tool(**args)`` ahead of the agent, held behind a lease; None when it may not run."""
        self._expire()
        saga = self._saga
        if saga is None or self._closed:
            return None
        entry = self._tools.get(tool) if isinstance(tool, str) else None
        if entry is None:
            self.stats._count("refused", "not a tool given to the speculator")
            return None
        spec, fn = entry
        if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
            self.stats._count("refused", "arguments are not a mapping of names")
            return None
        plain = {k: untag(v) for k, v in args.items()}
        refusal = self._refusal(saga, spec, plain)
        if refusal is not None:
            self.stats._count("refused", refusal)
            return None
        digest = args_digest(plain)
        if digest is None:
            self.stats._count("refused", "arguments are not plain JSON")
            return None
        keys = self._keys(tool, plain)
        stale = None
        with self._lock:
            if self._saga is not saga:  # closed while the gate was asked
                return None
            known = self._by_call.get((tool, digest))
            if known is not None:
                held = self._held[known]
                if not self._stale(saga, held):
                    return held.lease  # already running ahead: once is enough
                self._forget(held)  # the saga wrote over it: guess again
                stale = held
            lease = self._keeper.issue(intent=self.intent, saga_id=saga.saga_id, tool=tool, digest=digest, ttl=self.ttl)
            began = _Began()
            future = self._pool.submit(_guess, saga, began, fn, plain, f"speculation:{lease.lease_id}")
            self._held[lease.lease_id] = _Held(lease, spec, fn, future, self._clock(), keys, began)
            self._by_call[(tool, digest)] = lease.lease_id
            self.stats.started += 1
        if stale is not None:
            self._waste(stale, _STALE)
        return lease

    def _refusal(self, saga: Saga, spec: ToolSpec, plain: dict[str, Any]) -> str | None:
        """Why the saga's gate will not let this call run ahead, or None."""
        if spec.semantics is not _REVERSIBLE:  # asked here too: a gate=None saga speculates REVERSIBLE only
            return f"only a REVERSIBLE step may be speculated; {spec.name!r} is {spec.semantics.value}"
        if saga.status is not SagaStatus.OPEN or saga.stopped is not None:
            return "the saga is not open"
        gate = saga.gate
        if gate is None:
            return None  # the saga opted out of every gate (its start record says so)
        check = getattr(gate, "check_speculation", None)
        if check is None:
            return f"the gate ({type(gate).__name__}) has no check_speculation: nothing is speculated"
        request = StepRequest(saga.saga_id, 0, spec.name, spec.semantics, redact_args(plain), saga.tags)
        try:
            check(request)
        except StepRefused as refused:
            return f"{refused.rule or 'gate'}: {refused.reason}"
        except Exception as err:  # noqa: BLE001 - a gate that cannot answer refuses (fail closed)
            return f"the gate could not answer: {type(err).__name__}"
        return None

    # -- redeeming ---------------------------------------------------------------------

    def _take(self, saga: Saga, tool: str, plain: dict[str, Any]) -> _Held | None:
        """The speculation held for exactly this call, its lease verified now; None otherwise."""
        if not self._held:
            return None
        digest = args_digest(plain)
        if digest is None:
            return None
        with self._lock:
            lease_id = self._by_call.get((tool, digest))
            held = self._held.get(lease_id) if lease_id is not None else None
            if held is None:
                return None
            self._forget(held)
            refusal = self._keeper.refusal(held.lease, intent=self.intent, saga_id=saga.saga_id, tool=tool,
                                           digest=digest)
        if refusal is not None:
            self._waste(held, refusal)
            return None
        return held

    def _prepare(self, saga: Saga, spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], aio: bool) -> tuple[dict[str, Any], dict[str, Any], _Held | None, _Use]:
        step = spec.step_kwargs(fn, args, kwargs)
        plain = {k: untag(v) for k, v in step["args"].items()}
        use = _Use()
        if spec.semantics is not _REVERSIBLE:
            if callable(self._touches.get(spec.name)):  # its resources depend on its arguments
                _rewrap(step, fn, functools.partial(_noting, self._wrote, self._keys(spec.name, plain)))
            return step, plain, None, use
        held = self._take(saga, spec.name, plain)
        if held is not None:
            stale = functools.partial(self._stale, saga, held)
            _rewrap(step, fn, functools.partial(_redeemer, held, use, stale, aio))
        return step, plain, held, use

    def call_sync(self, saga: Saga, spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
        """A tool call in the attached saga: a step, its forward the held result when one matches."""
        step, plain, held, use = self._prepare(saga, spec, fn, args, kwargs, aio=False)
        try:
            result = saga.execute_sync(**step)
        finally:
            self._settle(saga, spec.name, held, use)
        self._next(spec.name, plain)
        return result

    async def call_async(self, saga: Saga, spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
        """The awaiting face of :meth:`call_sync`."""
        step, plain, held, use = self._prepare(saga, spec, fn, args, kwargs, aio=True)
        try:
            result = await saga.execute(**step)
        finally:
            self._settle(saga, spec.name, held, use)
        self._next(spec.name, plain)
        return result

    def _settle(self, saga: Saga, tool: str, held: _Held | None, use: _Use) -> None:
        """Record the redemption under the step it served; a held result the step never used is wasted."""
        if held is None:
            return
        if use.op is None:  # refused, stale, or the guess failed: not redeemed
            self._waste(held, use.why)
            return
        index = next((s.index for s in reversed(saga.steps) if s.tool == tool and s.operation_id == use.op), None)
        self.stats.redeemed += 1
        body = {"lease": held.lease.lease_id, "tool": tool, "intent": held.lease.intent,
                "held_ms": round((self._clock() - held.issued) * 1000)}
        saga.wal.append(RecordType.SPECULATION_REDEEMED.value, saga.saga_id, encodable(body), index)

    def _next(self, tool: str, plain: dict[str, Any]) -> None:
        """The agent goes back to its model now: run ahead what the predictor expects next."""
        predictor = self.predictor
        if predictor is None or self._closed:
            return
        try:
            predictor.observe(tool, plain)
            predictions = list(predictor.predict())
        except Exception as err:  # noqa: BLE001 - a guess that fails must not fail the agent's call
            self.stats._count("refused", f"the predictor failed: {type(err).__name__}")
            return
        for prediction in predictions:
            guess: Any = prediction  # a predictor is someone else's code: check what it returned
            if isinstance(guess, Prediction):
                self.speculate(guess.tool, guess.args)
            else:
                self.stats._count("refused", "the predictor returned something other than a Prediction")

    # -- dropping ----------------------------------------------------------------------

    def _forget(self, held: _Held) -> None:
        """Take ``held`` off the books (call with the lock held)."""
        self._held.pop(held.lease.lease_id, None)
        key = (held.lease.tool, held.lease.args_digest)
        if self._by_call.get(key) == held.lease.lease_id:
            del self._by_call[key]

    def _stale(self, saga: Saga, held: _Held) -> bool:
        """Whether a write of the saga that overlaps ``held`` may have landed after the guess began."""
        began = held.began
        count = began.count
        if count < 0:
            return False  # not begun yet: it will read every write that landed before it
        steps = saga.steps
        for step in (*began.running, *steps[count:]):
            if step.semantics is _REVERSIBLE or step.state in _NOT_LANDED:
                continue
            if held.keys is None:
                return True
            wrote = self._wrote_by(step)
            if wrote is None or not wrote.isdisjoint(held.keys):
                return True
        return False

    def _wrote_by(self, step: Step) -> frozenset[str] | None:
        """The resources a landed step wrote, as ``touches=`` names them; None: every resource."""
        entry = self._touches.get(step.tool)
        if entry is None or isinstance(entry, frozenset):
            return entry
        return self._wrote.get(step.operation_id)  # absent: its arguments never came through here

    def _keys(self, tool: str, plain: dict[str, Any]) -> frozenset[str] | None:
        """The resources of ``tool`` called with ``plain``, as ``touches=`` names them; None: every resource."""
        entry = self._touches.get(tool)
        if entry is None or isinstance(entry, frozenset):
            return entry
        try:
            found = entry(MappingProxyType(plain))
            keys = None if isinstance(found, str) else frozenset(found)
            if keys is None or not all(isinstance(k, str) for k in keys):
                raise TypeError(f"returned {type(found).__name__}, not strings")
        except Exception as err:  # noqa: BLE001 - counted; a resource guess must not fail the agent's call
            reason = f"touches[{tool!r}] failed: {type(err).__name__}"
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
            return None
        return keys

    def _expire(self) -> None:
        now = self._clock()
        with self._lock:
            stale = [h for h in self._held.values() if not now < h.lease.expires]
            for held in stale:
                self._forget(held)
        for held in stale:
            self._waste(held, "expired")

    def _waste(self, held: _Held, reason: str) -> None:
        """A speculation that will not be used: cancelled if it has not started, else undone when it ends."""
        self.stats._count("wasted", reason)
        if held.future.cancel():
            return
        held.future.add_done_callback(functools.partial(self._undo, held))

    def _undo(self, held: _Held, future: concurrent.futures.Future[Any]) -> None:
        """Call a wasted speculation's undo, when its tool declares one and the call succeeded."""
        if future.cancelled() or future.exception() is not None:
            return
        spec = held.spec
        try:
            compensate = undo_for(spec.name, held.fn, spec.options)
            if compensate is None:
                return
            key = f"speculation:{held.lease.lease_id}:undo"
            comp = build(compensate, future.result(), spec.name, key, spec.semantics)
            if comp is None:
                return
            undo = comp.fn if comp.fn is not None else resolve(comp.handler or "")
            kwargs, _secrets = resolve_credentials(comp.kwargs)
            _call(undo, kwargs, comp.idempotency_key or key)
        except Exception as err:  # noqa: BLE001 - counted; a speculation's undo must not fail the agent
            self.stats._count("undo_failed", f"undo failed: {type(err).__name__}")
            return
        self.stats.undone += 1


def planned_calls(calls: Iterable[Planned]) -> list[SpeculationLease]:
    """The adapters' hook: a framework planned these tool calls; run them ahead if a Speculator is attached.

    Called with the calls of one model response before the framework runs them one by one
    (``[("read", {"page": 3}), ...]``, or a ``TierAnswer``'s ``tool_calls``: ``cascade`` calls it
    with the verified answer's calls). Outside a saga, or with no Speculator attached,
    it does nothing and returns ``[]``.
    """
    saga = current_saga()
    speculator = saga.speculation if saga is not None else None
    if not isinstance(speculator, Speculator):
        return []
    return speculator.plan(calls)


def _check_intent(intent: Any) -> None:
    if not isinstance(intent, str) or not intent:
        raise ConfigurationError(
            f"a Speculator's intent= names what the agent works on now (a request or turn id), got {intent!r}"
        )


def _checked_touches(touches: Touches | None) -> dict[str, frozenset[str] | Callable[..., Iterable[str]]]:
    """``touches=`` as the speculator keeps it (collections made frozensets), or a one-line refusal."""
    if touches is None:
        return {}
    if not isinstance(touches, Mapping):
        raise ConfigurationError(
            "Speculator(touches=...) maps each tool's name to the resource keys it touches (a collection of "
            f"strings, or a function of the call's arguments returning them), got {type(touches).__name__}"
        )
    checked: dict[str, frozenset[str] | Callable[..., Iterable[str]]] = {}
    for name, keys in touches.items():
        if not isinstance(name, str):
            raise ConfigurationError(f"Speculator(touches=...) is keyed by tool names, got the key {name!r}")
        if callable(keys):
            checked[name] = keys
        elif isinstance(keys, Collection) and not isinstance(keys, str) and all(isinstance(k, str) for k in keys):
            checked[name] = frozenset(keys)
        else:
            raise ConfigurationError(
                f"Speculator(touches=...) gives {name!r} {keys!r}: give a collection of strings "
                "(['account:7']) or a function of the call's arguments returning them"
            )
    return checked


def _guess(saga: Saga, began: _Began, fn: Callable[..., Any], plain: Mapping[str, Any], key: str) -> Any:
    """A guess, on a worker thread: note what the saga had written, then make the call."""
    began.mark(saga.steps)
    return _call(fn, plain, key)


def _call(fn: Callable[..., Any], kwargs: Mapping[str, Any], key: str) -> Any:
    """Call ``fn(**kwargs)`` on this (worker) thread; a coroutine runs on a loop of its own."""
    given = dict(kwargs)
    if accepts_idempotency_key(fn) and _KEY not in given:
        given[_KEY] = key
    result = fn(**given)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _rewrap(step: dict[str, Any], fn: Callable[..., Any], wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Make the step's forward ``wrap(forward)``, keeping what the engine reads off the forward itself.

    The engine takes the tags off a front door's partial and finds an ``@inverse_of`` pairing
    through it; a wrapper hides both, so the tags come off here and the pairing is passed as
    ``compensate=`` (seen lost before: a redeemed call's undo never ran).
    """
    step["forward"] = wrap(untag_call(step["forward"]))
    options = step["options"]
    if options.compensate is None and options.semantics is not _IRREVERSIBLE:
        paired = inverse_for(fn)
        if paired is not None:
            step["options"] = options.with_changes(compensate=paired)


def _with_key(real: Callable[..., Any], idempotency_key: str) -> Any:
    return real(idempotency_key=idempotency_key) if accepts_idempotency_key(real) else real()


def _noting(wrote: dict[str, frozenset[str] | None], keys: frozenset[str] | None,
            real: Callable[..., Any]) -> Callable[..., Any]:
    """A write's forward that first notes its resources under its step's operation id."""
    if inspect.iscoroutinefunction(real):

        async def note_async(idempotency_key: str) -> Any:
            wrote[idempotency_key] = keys
            return await _with_key(real, idempotency_key)

        return note_async

    def note(idempotency_key: str) -> Any:
        wrote[idempotency_key] = keys
        return _with_key(real, idempotency_key)

    return note


def _redeemer(held: _Held, use: _Use, stale: Callable[[], bool], aio: bool,
              real: Callable[..., Any]) -> Callable[..., Any]:
    """The step's forward: the held result; the real call when the saga wrote over it or the guess failed.

    Asked when the forward runs (after the gate, which may have waited), as a real call would read then.
    """
    if aio:

        async def redeem_async(idempotency_key: str) -> Any:
            if stale():
                use.why = _STALE
            else:
                try:
                    value = await asyncio.wrap_future(held.future)
                except Exception:  # noqa: BLE001 - the guess failed: the agent's call runs for real
                    use.why = "the guess failed"
                else:
                    use.op = idempotency_key
                    return value
            # off the loop, as the engine runs a plain callable (an async tool's coroutine is
            # only made there, and awaited here)
            result = await asyncio.to_thread(_with_key, real, idempotency_key)
            return (await result) if inspect.isawaitable(result) else result

        return redeem_async

    def redeem(idempotency_key: str) -> Any:
        if stale():
            use.why = _STALE
        else:
            try:
                value = held.future.result()
            except Exception:  # noqa: BLE001
                use.why = "the guess failed"
            else:
                use.op = idempotency_key
                return value
        result = _with_key(real, idempotency_key)
        return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result

    return redeem
