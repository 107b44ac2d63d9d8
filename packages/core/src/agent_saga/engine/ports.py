"""The small interfaces the engine needs from the layers above it.

The engine never imports the gate; it calls whatever object satisfies
``GatePort``. That keeps the engine testable alone and lets the gate (budgets,
breaker, kill switch, approvals) grow without touching the state machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent_saga import boot
from agent_saga.ids import operation_id
from agent_saga.semantics import ActionSemantics

if TYPE_CHECKING:
    from agent_saga.engine.report import RollbackReport, StepOutcome

__all__ = ["GatePort", "Lifecycle", "SagaInfo", "SpeculationPort", "StepRequest", "add_lifecycle", "lifecycles"]


# These two are values (treat them as read-only) but not frozen dataclasses: one is
# built for every step, and a frozen dataclass costs three times as much to build.


@dataclass(slots=True)
class SagaInfo:
    """Who is asking to start: enough for a drain or a tag-scoped halt to decide."""

    saga_id: str
    name: str
    tags: frozenset[str] = frozenset()


@dataclass(slots=True)
class StepRequest:
    """One step about to run, as the gate sees it (before any side effect)."""

    saga_id: str
    step: int
    tool: str
    semantics: ActionSemantics
    args: Mapping[str, Any] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    #: The arguments that came tagged with their provenance (engine.tagged.Tagged), by name;
    #: ``args`` holds their plain values. None when no argument was tagged.
    provenance: Mapping[str, Any] | None = None
    #: Names in ``args`` that ``policy_args`` added (read from the call, not passed by the caller).
    policy_args: frozenset[str] = frozenset()

    @property
    def operation_id(self) -> str:
        """The step's forward idempotency key (derived, so only those who ask pay for it)."""
        return operation_id(self.saga_id, self.step, self.tool, "forward")


@runtime_checkable
class GatePort(Protocol):
    """What the engine asks of a pre-flight gate.

    ``check``/``check_async`` raise ``StepRefused`` to refuse (or
    ``SagaQuarantined`` to freeze the saga); returning means "go". They may wait
    (a human approval), which is why there is an async form. A gate whose check
    never waits may say so with a true ``never_waits`` attribute: the engine then
    calls ``check`` inline in both faces, sparing each step a trip through the
    driver. ``observe`` reports how a forward call that actually ran went
    (``error`` is None on success).

    Optional, looked up by name (a gate without them is still a gate):

    * ``recheck(request)`` -- the last-moment controls (the kill switch), asked
      immediately before every forward attempt that does not follow ``check``
      at once: after the intent is durable, after a wait, before each retry.
      Never waits, never debits; raises like ``check``.
    * ``check_undo(request)`` -- asked before every attempt of an undo, with
      ``request.tool`` the undo's handler name; raises ``StepRefused`` only for a
      halt that names that tool. No other control applies to an undo.
    * ``posture_since(known)`` -- ``(token, change)``: whether the kill switch
      the gate obeys changed since ``known``; the engine records ``change``.
    * ``check_speculation(request)`` -- may this call run ahead of the agent
      (``agent_saga.runtime.Speculator``)? Raises ``StepRefused`` if not; a gate
      without it has nothing speculated.
    """

    def admit(self, saga: SagaInfo) -> None: ...

    def check(self, request: StepRequest) -> None: ...

    async def check_async(self, request: StepRequest) -> None: ...

    def observe(self, request: StepRequest, error: BaseException | None) -> None: ...


class SpeculationPort(Protocol):
    """What a tool call asks of a saga's speculator (``agent_saga.runtime.Speculator``), when one is attached.

    ``call_sync``/``call_async`` run the call as a step of ``saga``, redeeming a result
    held for exactly this call when there is one. ``spec`` is the tool's ToolSpec (a
    layer above the engine, hence ``Any`` here). ``plan`` is the adapters' hook: the
    ``(tool, arguments)`` calls of one model response, run ahead where the speculator may;
    it returns the leases of those that started (the runtime's ``SpeculationLease``).
    """

    def plan(self, calls: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Any]: ...

    def call_sync(self, saga: Any, spec: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    async def call_async(self, saga: Any, spec: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


class Lifecycle(Protocol):
    """Something that takes part in every saga's start and end (recovery's leases).

    ``started`` runs before the start record is written and may return fields to
    add to it. ``ended`` runs once the end record is durable, with the rollback's
    report (None when the saga committed). ``abandoned`` runs when a rollback could
    not finish, or a commit could not be made durable (the log broke, the task was
    cancelled): the saga is left for the recovery daemon, with the report of what
    the rollback did (None for a failed commit). ``frozen`` runs when an operator's
    quarantine stopped the saga without an end: this process will take no more of its
    steps, so nothing may keep it looking alive. ``late`` runs for each step the rollback
    left in flight (``report.in_flight``), once it landed and was settled, always after
    ``ended``: ``outcome`` is how it was settled (None: it never ran), ``remaining`` how many
    left steps have still to land (the saga's lease is held until none). ``stray`` runs
    when a call that outlived its step (a timeout, a cancellation: the step was recorded
    UNKNOWN) finished with a result after its saga had settled that step: the effect
    landed, and ``detail`` says what it returned. All run on the caller's thread and must
    not block.
    """

    def started(self, saga_id: str, wal: Any) -> Mapping[str, Any] | None: ...

    def ended(self, saga_id: str, wal: Any, report: RollbackReport | None) -> None: ...

    def abandoned(self, saga_id: str, wal: Any, report: RollbackReport | None) -> None: ...

    def frozen(self, saga_id: str, wal: Any) -> None: ...

    def late(self, saga_id: str, wal: Any, step: int, outcome: StepOutcome | None, remaining: int) -> None: ...

    def stray(self, saga_id: str, wal: Any, step: int, detail: str) -> None: ...


_lifecycles: list[Lifecycle] = []


def add_lifecycle(hook: Lifecycle) -> None:
    """Install ``hook`` for every saga started from now on (once per hook)."""
    boot.ensure()  # the package's own hooks first, as when ``import agent_saga`` installed them
    if hook not in _lifecycles:
        _lifecycles.append(hook)


def lifecycles() -> tuple[Lifecycle, ...]:
    boot.ensure()
    return tuple(_lifecycles)
