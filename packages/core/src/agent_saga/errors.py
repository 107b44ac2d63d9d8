"""Every exception the library raises on purpose.

They live in one module so that a caller can catch ``agent_saga.SagaError`` and
know it is ours; the one exception is :class:`~agent_saga.SagaAborted`, which carries a
``RollbackReport`` and so lives beside it in :mod:`agent_saga.engine.report` (this module
sits below everything and imports nothing of the library, not even for types). Messages name what was wrong *and* how to fix it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BoundaryRequired",
    "CompensationError",
    "CompensationRefused",
    "ConfigurationError",
    "EventTimedOut",
    "NonDeterminismError",
    "NotApplied",
    "RepairRequested",
    "ResumeRefused",
    "SagaClosed",
    "SagaError",
    "SagaQuarantined",
    "SagaStopped",
    "SignalRefused",
    "StepRefused",
    "ToolFailed",
    "WALClosed",
    "WALCorrupt",
    "WALError",
    "WALFull",
    "WALRefused",
    "WALStalled",
]


class SagaError(Exception):
    """Base class of every error agent-saga raises deliberately."""


class ConfigurationError(SagaError, ValueError):
    """A step, compensation or policy was declared in a way that has no defined meaning."""


class CompensationError(ConfigurationError):
    """A compensation (or the factory that builds it) is malformed."""


class CompensationRefused(CompensationError):
    """A handler will not run what its recorded kwargs ask: they name something this reader does not trust.

    Recorded kwargs are data written by the agent. A handler that finds them naming a
    program, a URL, or a server or credential its own configuration does not define
    raises this instead of acting; retrying cannot change the answer, so the recovery
    daemon escalates the step (``undo-refused``) and dead-letters its saga at once.
    """


class CompensationUnproven(CompensationError):
    """The undo's system answered that it was done, without a proof this reader trusts.

    A remote service's "compensated" counts only with a receipt signed by its token key
    (``agent_saga.distributed``); a bare answer is reported-but-unproven: the undo is not
    counted as done, and a person is asked (the recovery daemon escalates it as
    ``compensation-unproven`` and dead-letters its saga at once).
    """


class NotApplied(SagaError):
    """Raise from a tool to state that its effect certainly did not happen.

    Any other exception leaves the step UNKNOWN, because a call that raised may
    still have landed (a timed-out charge may well have reached the card
    network). Raise ``NotApplied`` (``raise NotApplied("card declined") from err``)
    only when you *know* nothing changed; the step then needs no undo.
    """


class StepRefused(NotApplied):
    """The pre-flight gate refused a step before it ran."""

    def __init__(self, tool: str, reason: str, rule: str | None = None) -> None:
        self.tool = tool
        self.reason = reason
        self.rule = rule
        where = f" by rule {rule!r}" if rule else ""
        super().__init__(f"step {tool!r} refused{where}: {reason}")


class RepairRequested(StepRefused):
    """The call's arguments do not fit the tool's schema: refused, and the model may try once more.

    Nothing ran. The engine records ACTION_REPAIR_REQUESTED (not a failure of the
    run), and the framework hands the message -- the validation errors -- back to
    the model as the tool's error result.
    """

    def __init__(self, tool: str, errors: tuple[str, ...], rule: str = "repair") -> None:
        self.errors = tuple(errors)
        reason = (
            "the arguments do not fit the tool's schema: " + "; ".join(self.errors)
            + ". Fix them and call the tool again (one more try)"
        )
        super().__init__(tool, reason, rule)


class SagaStopped(StepRefused):
    """A refusal that ends the saga: it is rolled back however the framework treats the error.

    ``pattern`` names what was seen (``identical``, ``oscillation``, ``malformed``) and
    ``calls`` the calls that formed it, each ``{"step", "tool", "args"}``.
    """

    def __init__(
        self, tool: str, reason: str, rule: str, pattern: str, calls: tuple[dict[str, Any], ...] = ()
    ) -> None:
        self.pattern = pattern
        self.calls = tuple(calls)
        super().__init__(tool, reason, rule)


class BoundaryRequired(SagaError):
    """A tool registered as a saga step was called outside any saga boundary."""


class SagaClosed(SagaError):
    """A step was started on a saga that has already finished or is rolling back."""


class SagaQuarantined(SagaError):
    """The saga was frozen by an operator: it stops here and is *not* rolled back.

    During an incident, automatically reversing many sagas can be worse than
    leaving them still; a human decides, and the recovery daemon leaves it alone.
    """


class NonDeterminismError(SagaError):
    """A resumed saga asked for a different step than the one recorded at that position."""


class ResumeRefused(SagaError):
    """A crashed durable run cannot be resumed (now); the message says why, and nothing ran."""


class EventTimedOut(SagaError, TimeoutError):
    """A durable wait for an event (``wait_for_event``) ran out of time; recorded, so a resume says the same."""


class SignalRefused(SagaError, ValueError):
    """A signal (``agent_saga.signal``) was not sent: the message says why, and nothing was written."""


class ToolFailed(SagaError):
    """A step failed inside a run, and the code around it carried on as if it had not.

    Frameworks often turn a tool's exception into a message for the model. A run
    boundary that sees such a step when the run returns raises this inside itself,
    so the run is unwound instead of committed: a failed step is UNKNOWN, and a run
    standing on one is never committed. ``cause`` is the step's own exception.
    """

    def __init__(self, tool: str, cause: BaseException) -> None:
        self.tool = tool
        self.cause = cause
        # A NotApplied (a refusal among them) says the step did nothing: the run is unwound
        # because it went on past a failed step, not because that step may have landed.
        why = ("the step did nothing, but the run went on past it" if isinstance(cause, NotApplied)
               else "the step may have landed")
        super().__init__(
            f"tool {tool!r} failed inside the run ({type(cause).__name__}: {cause}) and the run carried "
            f"on (the framework turned the exception into a result for the model); {why}, so the run is "
            "unwound"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tool, self.cause))


class WALError(SagaError):
    """The write-ahead log could not do what was asked."""


class WALStalled(WALError):
    """A durability barrier was not reached within its bounded wait."""


class WALFull(WALError):
    """The log's pending queue is full and the backpressure policy refuses new records."""


class WALRefused(WALError, ValueError):
    """One record was refused because the log cannot encode it; nothing was written, the log is intact."""


class WALClosed(WALError):
    """A record was appended to a log that has been closed."""


class WALCorrupt(WALError):
    """A log file holds a record that cannot be read (not merely a torn final line)."""
