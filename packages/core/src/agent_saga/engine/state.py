"""What the engine tracks: a saga's status and each of its steps."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent_saga.ids import step_keys
from agent_saga.semantics import ActionSemantics, Compensation, StepState

__all__ = ["SagaStatus", "Step"]

_PENDING = StepState.PENDING


class SagaStatus(enum.StrEnum):
    OPEN = "OPEN"
    #: Its commit has begun: no new step starts; it waits for the steps in flight.
    COMPLETING = "COMPLETING"
    ROLLING_BACK = "ROLLING_BACK"
    COMPLETED = "COMPLETED"
    ROLLED_BACK = "ROLLED_BACK"
    FROZEN = "FROZEN"
    #: A rollback that could not finish here (broken log, cancellation): left to the daemon.
    ABANDONED = "ABANDONED"


# init=False: the __init__ below takes only what a caller sets (every step's _open passed twelve
# arguments positionally to the generated one, five of them its defaults, for fifteen stores).
@dataclass(slots=True, init=False)
class Step:
    """One step of a saga, as the engine tracks it."""

    saga_id: str
    index: int
    tool: str
    semantics: ActionSemantics
    state: StepState = StepState.PENDING
    compensation: Compensation | None = None
    undo_declared: bool = False  # a compensate= (or pairing) was given
    problem: str = ""  # why the compensation could not be built
    via_fallback: bool = False
    reconciled: bool | None = None  # what a reconciler answered about a failed call, if asked
    #: Stopped by the gate's last word: "before" any attempt ran, or "between" attempts
    #: after one that may have landed.
    halted: str = ""
    #: Past the fence (its intent or call under way) and its outcome not yet recorded.
    flying: bool = False
    #: The saga's end stopped waiting for it while it was in flight (its grace ran out): its
    #: outcome is settled when it lands (engine.unwind.settle_late).
    left: bool = False
    #: A rollback has begun to settle it (a call that outlived it, landing now, is not its own to settle).
    settling: bool = False
    _ids: tuple[str, str] | None = None

    def __init__(
        self, saga_id: str, index: int, tool: str, semantics: ActionSemantics, state: StepState = _PENDING,
        compensation: Compensation | None = None, undo_declared: bool = False, via_fallback: bool = False,
        flying: bool = False,
    ) -> None:
        self.saga_id = saga_id
        self.index = index
        self.tool = tool
        self.semantics = semantics
        self.state = state
        self.compensation = compensation
        self.undo_declared = undo_declared
        self.problem = ""
        self.via_fallback = via_fallback
        self.reconciled = None
        self.halted = ""
        self.flying = flying
        self.left = False
        self.settling = False
        self._ids = None

    # Derived when first needed: a REVERSIBLE step whose tool takes no key never needs them.
    @property
    def operation_id(self) -> str:
        """The forward call's idempotency key."""
        ids = self._ids  # once derived, read without a call (a durable step reads each key twice)
        return (ids if ids is not None else self._keys())[0]

    @property
    def compensation_key(self) -> str:
        """The undo's idempotency key (unless its Compensation names its own)."""
        ids = self._ids
        return (ids if ids is not None else self._keys())[1]

    def _keys(self) -> tuple[str, str]:
        if self._ids is None:
            self._ids = step_keys(self.saga_id, self.index, self.tool)
        return self._ids
