"""The circuit breaker: stop calling a dependency that keeps failing, then try once.

Per key (the tool name by default) a breaker is CLOSED (calls go through), OPEN
(calls are refused until ``cool_down`` has passed) or HALF-OPEN (exactly one trial
call goes through; its success closes the breaker, its failure reopens it).

It trips on ``failure_threshold`` consecutive failures, or when at least
``failure_rate`` of the calls in the last ``window`` seconds failed once there
were ``min_volume`` of them. Three choices where the obvious one is wrong:

* Only a tool that ran and raised is a failure. A refusal (``StepRefused``: over
  budget, blocked by a rule, denied by a human, or another breaker) means the
  controls worked; counting it would trip the breaker because of them.
* It never sees a compensation. The engine only consults the gate on the forward
  path, so a breaker can neither block a rollback nor be tripped by failing refunds.
* It fails open. If its shared store is unreachable it keeps deciding from this
  process's own state; an availability guard must not cause the outage itself.

Trips, trial calls and recoveries are written to the log (``BREAKER_*`` records,
under the saga whose call caused them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError, StepRefused
from agent_saga.gate._stores import StoreUnavailable
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument
from agent_saga.log.records import RecordType

__all__ = [
    "BreakerPolicy",
    "BreakerStore",
    "CircuitBreaker",
    "LocalBreakerStore",
    "get_breaker",
    "set_breaker",
]

log = logging.getLogger("agent_saga.gate.breaker")

Decision = Literal["allow", "probe", "refuse"]
Transition = Literal["none", "tripped", "recovered"]


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When to open (either trigger suffices) and how long to stay open.

    Set ``failure_threshold`` or ``failure_rate`` to None to use only the other.
    """

    failure_threshold: int | None = 5
    failure_rate: float | None = 0.5
    min_volume: int = 10
    window: float = 60.0
    cool_down: float = 30.0

    def __post_init__(self) -> None:
        t, r = self.failure_threshold, self.failure_rate
        if t is None and r is None:
            raise ConfigurationError("BreakerPolicy needs failure_threshold or failure_rate (or both)")
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ConfigurationError(f"BreakerPolicy.failure_threshold must be a whole number >= 1, got {t!r}")
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1):
            raise ConfigurationError(f"BreakerPolicy.failure_rate must be in (0, 1], e.g. 0.5, got {r!r}")
        if isinstance(self.min_volume, bool) or not isinstance(self.min_volume, int) or self.min_volume < 1:
            raise ConfigurationError(f"BreakerPolicy.min_volume must be a whole number >= 1, got {self.min_volume!r}")
        for label in ("window", "cool_down"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigurationError(f"BreakerPolicy.{label} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A store's answer to "may this call go?" (``retry_in`` seconds when refused)."""

    decision: Decision
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True)
class Change:
    """What recording one outcome did to the breaker."""

    transition: Transition
    consecutive: int = 0
    volume: int = 0
    failures: int = 0


@runtime_checkable
class BreakerStore(Protocol):
    """Breaker state for one or many processes. Raises StoreUnavailable when unreachable."""

    def before(self, key: str, op: str, now: float, policy: BreakerPolicy) -> Verdict: ...

    def record(self, key: str, op: str, ok: bool, now: float, policy: BreakerPolicy) -> Change: ...

    def release(self, key: str, op: str, now: float, policy: BreakerPolicy) -> None: ...


@dataclass
class _State:
    state: str = "closed"
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    failures: int = 0
    consecutive: int = 0
    opened_at: float = 0.0
    probe_op: str = ""
    probe_at: float = 0.0


class LocalBreakerStore:
    """Breaker state in this process (the default, and the fallback when a shared store is down)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}

    def before(self, key: str, op: str, now: float, policy: BreakerPolicy) -> Verdict:
        with self._lock:
            s = self._states.get(key)
            if s is None or s.state == "closed":
                return Verdict("allow")
            if s.state == "open":
                if now < s.opened_at + policy.cool_down:
                    return Verdict("refuse", s.opened_at + policy.cool_down - now)
                s.state, s.probe_op, s.probe_at = "half", op, now
                return Verdict("probe")
            # Half-open: one trial in flight. A trial that never reported back
            # (its process died, it was cancelled) is replaced after a cool-down.
            if now >= s.probe_at + policy.cool_down:
                s.probe_op, s.probe_at = op, now
                return Verdict("probe")
            return Verdict("refuse", s.probe_at + policy.cool_down - now)

    def record(self, key: str, op: str, ok: bool, now: float, policy: BreakerPolicy) -> Change:
        with self._lock:
            s = self._states.setdefault(key, _State())
            if s.state == "half":
                if op != s.probe_op:
                    return Change("none")
                if ok:
                    self._states[key] = _State()
                    return Change("recovered")
                s.state, s.opened_at, s.probe_op = "open", now, ""
                return Change("tripped", 1, 1, 1)
            if s.state == "open":
                return Change("none")
            while s.outcomes and s.outcomes[0][0] <= now - policy.window:
                if not s.outcomes.popleft()[1]:
                    s.failures -= 1
            s.outcomes.append((now, ok))
            if ok:
                s.consecutive = 0
                return Change("none")
            s.failures += 1
            s.consecutive += 1
            volume, failures, consecutive = len(s.outcomes), s.failures, s.consecutive
            if _trips(policy, consecutive, volume, failures):
                self._states[key] = _State(state="open", opened_at=now)
                return Change("tripped", consecutive, volume, failures)
            return Change("none", consecutive, volume, failures)

    def release(self, key: str, op: str, now: float, policy: BreakerPolicy) -> None:
        with self._lock:
            s = self._states.get(key)
            if s is not None and s.state == "half" and s.probe_op == op:
                # The trial never ran: reopen with the cool-down already spent,
                # so the very next call becomes the trial.
                s.state, s.opened_at, s.probe_op = "open", now - policy.cool_down, ""

    def state(self, key: str) -> str:
        with self._lock:
            s = self._states.get(key)
            return "closed" if s is None else s.state


def _trips(policy: BreakerPolicy, consecutive: int, volume: int, failures: int) -> bool:
    if policy.failure_threshold is not None and consecutive >= policy.failure_threshold:
        return True
    return (
        policy.failure_rate is not None
        and volume >= policy.min_volume
        and failures / volume >= policy.failure_rate
    )


def _tool_key(request: StepRequest) -> str:
    return request.tool


class CircuitBreaker:
    """Refuses calls to a dependency that keeps failing (see the module docstring).

    ``store`` shares state across processes (``RedisBreakerStore``); without one,
    state is per process. ``key`` picks what is broken together (default: the tool).
    """

    def __init__(
        self,
        policy: BreakerPolicy | None = None,
        *,
        wal: WAL | str | os.PathLike[str] | None = None,
        store: BreakerStore | None = None,
        key: Callable[[StepRequest], str] = _tool_key,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if policy is not None and not isinstance(policy, BreakerPolicy):
            raise ConfigurationError(f"CircuitBreaker needs a BreakerPolicy, got {policy!r}")
        self.policy = policy or BreakerPolicy()
        self.wal = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
        self.store = store
        self.local = LocalBreakerStore()
        self._key = key
        self._clock = clock
        self._degraded = False

    def _call(self, method: str, *args: Any) -> Any:
        store = self.store
        if store is not None:
            try:
                result = getattr(store, method)(*args)
            except StoreUnavailable as err:
                if not self._degraded:
                    log.warning("breaker store %r unreachable (%s); deciding from this process's state", store, err)
                    self._degraded = True
            else:
                if self._degraded:
                    log.warning("breaker store %r reachable again", store)
                    self._degraded = False
                return result
        return getattr(self.local, method)(*args)

    @property
    def degraded(self) -> bool:
        """True while the shared store is unreachable and state is per process."""
        return self._degraded

    def before(self, request: StepRequest) -> bool:
        """Let the call through (True if it is the trial call) or raise StepRefused."""
        key = self._key(request)
        verdict: Verdict = self._call("before", key, request.operation_id, self._clock(), self.policy)
        if verdict.decision == "refuse":
            raise StepRefused(
                request.tool,
                f"circuit open for {key!r} after repeated failures; next trial call in {verdict.retry_in:.1f}s",
                f"breaker:{key}",
            )
        if verdict.decision == "probe":
            self._write(RecordType.BREAKER_PROBE, request, {"key": key})
            return True
        return False

    def release(self, request: StepRequest) -> None:
        """A call let through here was refused further on: it will never report back."""
        self._call("release", self._key(request), request.operation_id, self._clock(), self.policy)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        """Count how a call that ran went; refusals are not outcomes of the dependency."""
        if isinstance(error, StepRefused):
            return
        key = self._key(request)
        change: Change = self._call(
            "record", key, request.operation_id, error is None, self._clock(), self.policy
        )
        if change.transition == "tripped":
            self._write(RecordType.BREAKER_TRIPPED, request, {
                "key": key, "consecutive": change.consecutive, "volume": change.volume,
                "failures": change.failures, "cool_down": self.policy.cool_down,
                "error": f"{type(error).__name__}: {error}" if error is not None else None,
            })
        elif change.transition == "recovered":
            self._write(RecordType.BREAKER_RECOVERED, request, {"key": key})

    def _write(self, rtype: RecordType, request: StepRequest, body: dict[str, Any]) -> None:
        if self.wal is None:
            return
        body = {"tool": request.tool, "degraded": self._degraded, **body}
        try:
            self.wal.append(rtype.value, request.saga_id, body, request.step)
        except Exception as err:  # noqa: BLE001 - the breaker must not fail a call over its audit
            log.warning("could not log %s for %r: %s", rtype.value, request.tool, err)

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.policy!r}, store={self.store!r})"


_breaker_lock = threading.Lock()
_breaker: CircuitBreaker | None = None


def set_breaker(breaker: CircuitBreaker | None) -> None:
    """Install a process-wide breaker, used by every gate not given its own (None removes it)."""
    global _breaker
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise ConfigurationError(f"set_breaker() needs a CircuitBreaker, got {breaker!r}")
    with _breaker_lock:
        _breaker = breaker


def get_breaker() -> CircuitBreaker | None:
    """The process-wide breaker, if one was installed."""
    return _breaker
