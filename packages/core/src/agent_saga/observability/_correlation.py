"""Which saga and step a line of log belongs to, kept in contextvars by one interceptor.

The engine tells its interceptor chain (``engine/observe.py``) about every saga, step
and rollback step, in the caller's own context (thread, task) before and after the
work. :class:`Correlation` is one such interceptor: before the work it sets the saga id
and step number in two ContextVars, after it resets them, so code running inside a step
-- the tool, a framework's callback, a task the tool spawned -- sees its own saga and
no other. Concurrent sagas run in their own contexts (asyncio gives each task a copy;
threads start empty), so their ids cannot bleed into each other's lines.

It also writes one line per saga, step and rollback step to the ``agent_saga.saga``
logger, which is how a saga's history shows up in the logs an operator already reads.

Log records of the library's loggers (``agent_saga`` and below) are stamped with
``saga_id``, ``step_id``, ``trace_id`` and ``span_id`` when they are created, by a
wrapper around the logging module's record factory (stamping at creation is the only
way to reach every handler, including ones the application configured). Records of
other loggers are left alone: an application's ``extra={"saga_id": ...}`` would
otherwise collide with the stamp. :class:`CorrelationFilter` stamps an application's
own records, on the handlers it is attached to.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from agent_saga.engine import observe
from agent_saga.redaction import scrub_text
from agent_saga.semantics import Outcome, StepState

__all__ = [
    "FIELDS",
    "Correlation",
    "CorrelationFilter",
    "Slot",
    "current_ids",
    "disable",
    "enable",
    "saga_outcome",
    "set_trace_source",
]

#: The attributes stamped on a log record (None where there is nothing to say).
FIELDS = ("saga_id", "step_id", "trace_id", "span_id")

_saga_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_saga_log_saga", default=None)
_step_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("agent_saga_log_step", default=None)

lines = logging.getLogger("agent_saga.saga")

#: Returns the current (trace id, span id) in hex, or None; installed by setup_telemetry().
TraceSource = Callable[[], tuple[str, str] | None]
_trace_source: TraceSource | None = None


def set_trace_source(source: TraceSource | None) -> None:
    """Where trace and span ids come from (telemetry installs one; None: no ids)."""
    global _trace_source
    _trace_source = source


def current_ids() -> dict[str, Any]:
    """The correlation fields of the code running now: saga, step, trace and span."""
    ids: dict[str, Any] = {"saga_id": _saga_id.get(), "step_id": _step_id.get(), "trace_id": None, "span_id": None}
    source = _trace_source
    if source is not None:
        found = source()
        if found is not None:
            ids["trace_id"], ids["span_id"] = found
    return ids


def _stamp(record: logging.LogRecord) -> None:
    for key, value in current_ids().items():
        if not hasattr(record, key):  # a value set by the caller's own extra= wins
            setattr(record, key, value)


class CorrelationFilter(logging.Filter):
    """Stamps every record passing a handler with the saga, step, trace and span ids.

    Attach it to the handlers of your own application (``handler.addFilter(...)``) so
    its lines join the library's; it never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        _stamp(record)
        return True


def saga_outcome(end: observe.SagaEnd) -> str:
    """COMPLETED, ROLLED_BACK (every effect undone) or FAILED (something may still stand).

    The engine's ending is finer (``end.status``): an unclean or interrupted rollback, an
    abandoned commit and a saga frozen for a human all leave effects standing, so all
    read FAILED here.
    """
    if end.status == "COMPLETED":
        return "COMPLETED"
    if end.status == "ROLLED_BACK" and end.report is not None and end.report.clean:
        return "ROLLED_BACK"
    return "FAILED"


def _reset(var: contextvars.ContextVar[Any], token: contextvars.Token[Any]) -> None:
    try:
        var.reset(token)
    except ValueError:
        # Ended in another context than it started in (a framework moved the saga's
        # end to another task): that context never held our value; nothing to undo.
        pass


class Correlation(observe.Interceptor):
    """Sets the saga and step ids around the work, and logs one line for each."""

    def saga(self, event: observe.SagaEvent) -> observe.Wrapper:
        token = _saga_id.set(event.saga_id)
        step_token = _step_id.set(None)
        lines.debug("saga %s (%s) started", event.saga_id, event.name)
        end: observe.SagaEnd = yield
        outcome = saga_outcome(end)
        level = logging.INFO if outcome == "COMPLETED" else logging.WARNING if outcome == "ROLLED_BACK" else logging.ERROR
        detail = f" (engine: {end.status})" if end.status != outcome else ""
        if end.report is not None:
            detail += f"; cause: {end.report.cause}"
        lines.log(level, "saga %s %s%s", event.saga_id, outcome, detail)
        _reset(_step_id, step_token)
        _reset(_saga_id, token)

    def step(self, event: observe.StepEvent) -> observe.Wrapper:
        saga_token = _saga_id.set(event.saga_id)  # a step's saga may be joined from elsewhere
        token = _step_id.set(event.step)
        end: observe.StepEnd = yield
        if end.error is None:
            lines.info("step %d %s (%s) %s", event.step, event.tool, event.semantics.value, end.state.value)
        else:
            level = logging.INFO if end.state is StepState.NOT_APPLIED else logging.WARNING
            lines.log(level, "step %d %s (%s) %s: %s: %s", event.step, event.tool, event.semantics.value,
                      end.state.value, type(end.error).__name__, scrub_text(str(end.error)))
        _reset(_step_id, token)
        _reset(_saga_id, saga_token)

    def rollback_step(self, event: observe.RollbackEvent) -> observe.Wrapper:
        saga_token = _saga_id.set(event.saga_id)
        token = _step_id.set(event.step)
        outcome = yield
        settled = outcome.outcome in (Outcome.COMPENSATED, Outcome.KEPT)
        lines.log(logging.INFO if settled else logging.ERROR, "rollback of step %d %s: %s%s", event.step,
                  event.tool, outcome.outcome.value, f" ({outcome.detail})" if outcome.detail else "")
        _reset(_step_id, token)
        _reset(_saga_id, saga_token)


# -- installation: shared by configure_logging() and setup_telemetry() -----------------------

_lock = threading.Lock()
_users: set[str] = set()
_interceptor = Correlation()
_factories: tuple[Callable[..., logging.LogRecord], Callable[..., logging.LogRecord]] | None = None


def _stamping(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _users and (record.name == "agent_saga" or record.name.startswith("agent_saga.")):
            _stamp(record)
        return record

    return factory


def enable(user: str) -> None:
    """Install the interceptor and the record stamp for ``user`` (idempotent).

    The interceptor is (re)placed last in the chain, inside telemetry's: the lines it
    writes at a step's end then still see the step's span as the current one.
    """
    global _factories
    with _lock:
        _users.add(user)
        observe.remove_interceptor(_interceptor)
        observe.add_interceptor(_interceptor)
        if _factories is None:
            previous = logging.getLogRecordFactory()
            _factories = (previous, _stamping(previous))
            logging.setLogRecordFactory(_factories[1])


def disable(user: str) -> None:
    """Undo :func:`enable` for ``user``; the last user removes the interceptor and the stamp."""
    global _factories
    with _lock:
        _users.discard(user)
        if _users:
            return
        observe.remove_interceptor(_interceptor)
        # Unwrap the factory only if nobody wrapped it after us; otherwise ours stays in
        # their chain and stamps nothing while it has no user.
        if _factories is not None and logging.getLogRecordFactory() is _factories[1]:
            logging.setLogRecordFactory(_factories[0])
            _factories = None


class _Setup(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Setup)


class Slot:
    """Where the one setup of ``user`` (configure_logging's, setup_telemetry's) is installed.

    Installing replaces the previous setup; closing a setup that was already replaced does
    nothing, so an old handle's ``close()`` never takes out its successor.
    """

    def __init__(self, user: str) -> None:
        self.user = user
        self._lock = threading.Lock()
        self._current: _Setup | None = None

    def install(self, put: Callable[[], S]) -> S:
        """Close the previous setup, then ``put()`` in the new one (under the lock) and return it."""
        previous = self._current
        if previous is not None:
            previous.close()
        with self._lock:
            setup = put()
            self._current = setup
        enable(self.user)  # after put(): telemetry's spans first, so the lines see them current
        return setup

    def uninstall(self, setup: _Setup, take: Callable[[], None]) -> None:
        """``take()`` ``setup`` out (under the lock) if it is still the installed one."""
        with self._lock:
            if self._current is not setup:
                return
            self._current = None
            take()
        disable(self.user)
