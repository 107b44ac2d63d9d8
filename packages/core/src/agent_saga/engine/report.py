"""RollbackReport: exactly what an unwind did, step by step.

``clean`` is true only when every step that committed (or might have) was undone
or declared to need no undo. A partial unwind can never read as a clean one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agent_saga.errors import SagaError
from agent_saga.semantics import ActionSemantics, Outcome, StepState

__all__ = ["RollbackReport", "SagaAborted", "StepOutcome"]


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """One step's fate in a rollback."""

    step: int
    tool: str
    semantics: ActionSemantics
    state: StepState  # how its forward call ended
    outcome: Outcome
    compensation: str | None = None  # what undo was (or would have been) run
    attempts: int = 0
    idempotency_key: str | None = None
    detail: str = ""
    via_fallback: bool = False


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """The verdict of one rollback, newest step first."""

    saga_id: str
    cause: str
    steps: tuple[StepOutcome, ...]
    halted: bool = False
    #: Why the unwind stopped before it finished (the log broke, the task was cancelled);
    #: the steps it did not reach are UNRESOLVED and the recovery daemon finishes them.
    interrupted: str | None = None
    #: Tools that ran inside the saga with no declared semantics (``patch_all`` in observe
    #: mode): their effects were not protected, so the saga can never be clean.
    unprotected: tuple[str, ...] = ()

    def with_outcome(self, outcome: Outcome) -> tuple[StepOutcome, ...]:
        return tuple(s for s in self.steps if s.outcome is outcome)

    @property
    def compensated(self) -> tuple[StepOutcome, ...]:
        return self.with_outcome(Outcome.COMPENSATED)

    @property
    def failed(self) -> tuple[StepOutcome, ...]:
        return self.with_outcome(Outcome.FAILED)

    @property
    def orphaned(self) -> tuple[StepOutcome, ...]:
        return self.with_outcome(Outcome.ORPHANED)

    @property
    def unresolved(self) -> tuple[StepOutcome, ...]:
        return self.with_outcome(Outcome.UNRESOLVED)

    @property
    def kept(self) -> tuple[StepOutcome, ...]:
        return self.with_outcome(Outcome.KEPT)

    @property
    def in_flight(self) -> tuple[StepOutcome, ...]:
        """Steps still running when the rollback ended (its grace ran out): each is settled as it lands."""
        return tuple(s for s in self.steps if s.outcome is Outcome.UNRESOLVED and s.state is StepState.PENDING)

    @property
    def clean(self) -> bool:
        """True only if nothing the saga did is still standing unaccounted for."""
        return (
            not self.halted
            and self.interrupted is None
            and not self.unprotected
            and all(s.outcome in (Outcome.COMPENSATED, Outcome.KEPT) for s in self.steps)
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (enums as their values)."""
        return {
            "saga_id": self.saga_id,
            "cause": self.cause,
            "clean": self.clean,
            "halted": self.halted,
            "interrupted": self.interrupted,
            "unprotected": list(self.unprotected),
            "steps": [
                {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(s).items()}
                for s in self.steps
            ],
        }

    def format_text(self) -> str:
        """A report a person can read in an incident."""
        verdict = "clean" if self.clean else "NOT CLEAN - needs a human"
        lines = [f"rollback of saga {self.saga_id}: {verdict}", f"  cause: {self.cause}"]
        marks = {
            Outcome.COMPENSATED: "<- undone ",
            Outcome.KEPT: "   kept   ",
            Outcome.FAILED: "!! FAILED ",
            Outcome.ORPHANED: "!! ORPHAN ",
            Outcome.UNRESOLVED: "?? UNRESOLVED",
        }
        for s in self.steps:
            if s.state is StepState.PENDING and s.outcome is Outcome.UNRESOLVED:
                lines.append(f"  ?? IN FLIGHT  step {s.step} {s.tool} ({s.detail})")
                continue
            how = f" via {s.compensation}" if s.compensation else ""
            extra = f" ({s.detail})" if s.detail else ""
            lines.append(f"  {marks[s.outcome]} step {s.step} {s.tool} [{s.state.value}]{how}{extra}")
        if self.halted:
            lines.append("  rollback halted after a failed compensation; older steps were not touched")
        if self.interrupted is not None:
            lines.append(f"  rollback interrupted ({self.interrupted}); the recovery daemon finishes it")
        unknown = [s for s in self.steps if s.state is StepState.UNKNOWN and s.outcome is Outcome.UNRESOLVED]
        for s in unknown:  # the usual reason a first rollback is not clean: an ordinary exception
            lines.append(f"  fix: step {s.step} {s.tool} failed and nothing says whether it acted; if its error "
                         "means it did nothing, declare it (not_applied_on=(TheError,)) or raise NotApplied")
        for tool in self.unprotected:
            lines.append(f"  !! UNPROTECTED {tool}: ran with no declared semantics, so nothing undid it")
        counts = ", ".join(f"{len(self.with_outcome(o))} {o.value}" for o in Outcome if self.with_outcome(o))
        lines.append(f"  {counts or 'no steps'}")
        return "\n".join(lines)


class SagaAborted(SagaError):
    """The saga failed and was unwound; ``report`` says exactly how cleanly.

    ``cause`` is the exception that ended the saga (also chained as ``__cause__``).
    """

    def __init__(self, cause: BaseException, report: RollbackReport) -> None:
        self.cause = cause
        self.report = report
        verdict = "clean" if report.clean else "NOT clean"
        # report.cause is the cause as the rollback recorded it: secrets scrubbed (engine.saga).
        super().__init__(f"saga {report.saga_id} aborted by {report.cause}; rollback {verdict}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.cause, self.report))
