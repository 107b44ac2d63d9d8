"""AgentKit: the whole engine behind one object, and what it can tell an agent.

``guarantees()`` is a versioned manifest of what is enforced *and* what is not
claimed; ``status()`` is live posture, and it fails closed: a signal that cannot
be read makes the kit report itself not ok rather than assume the best.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Unpack

from agent_saga._version import __version__
from agent_saga.context import Boundary
from agent_saga.engine.ports import GatePort
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal
from agent_saga.registry import inverse_for
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["MANIFEST_VERSION", "AgentKit"]

MANIFEST_VERSION = 1

_ENFORCED = (
    ("semantics-declared", "every tool declares REVERSIBLE, COMPENSABLE or IRREVERSIBLE; nothing is inferred"),
    ("write-ahead", "a non-REVERSIBLE step's intent is durable before its effect starts (durable log only)"),
    ("lifo-rollback", "on failure, finished steps are undone newest-first, each at most once in-process"),
    ("idempotency-keys", "every forward and undo call that names idempotency_key gets a deterministic key, reused across retries"),
    ("unknown-is-not-clean", "a call that raised or timed out is UNKNOWN; it is never reported clean unless undone"),
    ("honest-report", "RollbackReport.clean is true only when every committed or unknown step was undone or needed none"),
    ("irreversible-has-no-undo", "an IRREVERSIBLE step given an undo is refused; a committed one is reported orphaned"),
)
_NOT_CLAIMED = (
    "isolation: a saga commits step by step, so other readers see intermediate state",
    "that a compensation which returned actually undid the effect in the remote system (use reconciliation)",
    "crash recovery when the log is not durable (MemoryWAL)",
    "exactly-once forward effects: a retried call relies on the tool honouring its idempotency key",
    "anything about the quality of a model's decisions",
)


class AgentKit:
    """The ergonomic front door: ``safe_tool`` to wrap, ``transaction`` to bound."""

    def __init__(
        self, name: str, *, wal: WAL | None = None, gate: GatePort | None = None
    ) -> None:
        self.name = name
        self._wal = wal
        self.gate = gate
        self._tools: dict[str, tuple[ToolSpec, Callable[..., Any]]] = {}

    @property
    def wal(self) -> WAL:
        return self._wal or default_wal()

    def safe_tool(
        self,
        fn: Callable[..., Any],
        *,
        semantics: ActionSemantics | str | None = None,
        name: str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Callable[..., Any]:
        """Wrap ``fn`` as a step; outside a transaction the wrapper calls ``fn`` untouched.

        ``compensate`` maps the result to a Compensation, or to a dict
        ``{"handler": "registered.name", "kwargs": {...}}``. Left out on a
        COMPENSABLE tool, the ``@inverse_of`` pairing of ``fn`` is used. Every
        step option (see :class:`~agent_saga.StepOptions`) is accepted as a keyword.
        """
        spec = ToolSpec.for_function(fn, name=name, semantics=semantics, options=options, **more)
        self._tools[spec.name] = (spec, fn)
        return spec.wrap(fn)

    def transaction(self, *, options: SagaOptions | None = None, **more: Unpack[SagaKwargs]) -> Boundary:
        """A saga boundary using this kit's name, log and gate (``async with`` or ``with``).

        Takes every saga option (see :class:`~agent_saga.SagaOptions`); one given wins over the kit's.
        """
        return Boundary(options=SagaOptions.build(options, more, name=self.name, wal=self._wal, gate=self.gate))

    def guarantees(self) -> dict[str, Any]:
        """A machine-readable manifest of what this kit enforces, and what it does not claim."""
        wal = self.wal
        return {
            "manifest_version": MANIFEST_VERSION,
            "library": "agent-saga",
            "library_version": __version__,
            "kit": self.name,
            "enforced": [{"id": key, "statement": text} for key, text in _ENFORCED],
            "not_claimed": list(_NOT_CLAIMED),
            "log": {"location": wal.location, "durable": wal.durable},
            "gate": type(self.gate).__name__ if self.gate is not None else None,
            "tools": [self._describe(spec, fn) for spec, fn in self._tools.values()],
        }

    @staticmethod
    def _describe(spec: ToolSpec, fn: Callable[..., Any]) -> dict[str, Any]:
        if spec.options.compensate is not None:
            undo = "explicit"
        elif inverse_for(fn) is not None:
            undo = "paired"
        else:
            undo = None
        return {"name": spec.name, "semantics": spec.semantics.value, "undo": undo}

    def status(self) -> dict[str, Any]:
        """Live posture. ``ok`` is false when any safety signal cannot be read."""
        signals: dict[str, dict[str, Any]] = {}
        try:
            wal = self.wal
            broken = getattr(wal, "broken", None)
            signals["log"] = {
                "ok": wal.durable and broken is None,
                "location": wal.location,
                "detail": str(broken) if broken else ("durable" if wal.durable else "NOT durable: no crash recovery"),
            }
        except Exception as err:  # noqa: BLE001 - an unreadable signal is reported, not assumed fine
            signals["log"] = {"ok": False, "detail": f"unreadable: {err!r}"}
        try:
            gate_status = getattr(self.gate, "status", None)
            signals["gate"] = (
                dict(gate_status()) if callable(gate_status)
                else {"ok": True, "detail": "no gate configured" if self.gate is None else "configured"}
            )
        except Exception as err:  # noqa: BLE001
            signals["gate"] = {"ok": False, "detail": f"unreadable: {err!r}"}
        return {"kit": self.name, "ok": all(s.get("ok") for s in signals.values()), "signals": signals}
