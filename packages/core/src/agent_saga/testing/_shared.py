"""What every conformance case shares: the tools' ledger and their one undo, the scripted call.

Every conformance tool notes ``do:<ref>`` when its effect happens and the registered undo
notes ``undo:<ref>``: a run leaves nothing standing exactly when every ``do`` has its
``undo``. Tools run on whatever thread or task the framework picks, so the ledger is
locked, and a test can wait (bounded) for it to balance after calls that end late.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.engine.report import SagaAborted
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.saga import Saga
from agent_saga.engine.step_options import StepOptions, option_names
from agent_saga.errors import ToolFailed
from agent_saga.plugins.manager import plugins
from agent_saga.registry import compensator
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = [
    "UNDO_HANDLER", "Call", "assert_wrap_tool_hook", "clear_ledger", "every_step_option", "ledger", "left_standing", "note", "root_cause",
    "spy_on_steps", "standing", "undo", "undo_of", "wait_balanced",
]

UNDO_HANDLER = "agent_saga.testing.undo"
_ledger: list[str] = []
_changed = threading.Condition()


def note(entry: str) -> None:
    """Record one effect (``do:<ref>``) or undo (``undo:<ref>``)."""
    with _changed:
        _ledger.append(entry)
        _changed.notify_all()


def ledger() -> list[str]:
    """What the conformance tools and their undo did, in order."""
    with _changed:
        return list(_ledger)


def clear_ledger() -> None:
    with _changed:
        _ledger.clear()


def left_standing(entries: list[str]) -> list[str]:
    """The refs of ``entries`` (``do:<ref>`` / ``undo:<ref>``) with an effect no undo reversed, once per effect."""
    done = Counter(e[3:] for e in entries if e.startswith("do:"))
    done.subtract(e[5:] for e in entries if e.startswith("undo:"))
    return sorted(ref for ref, left in done.items() for _ in range(max(left, 0)))


def standing() -> list[str]:
    """The effects no undo has reversed (a ref once per effect left standing)."""
    with _changed:
        return left_standing(_ledger)


def wait_balanced(timeout: float) -> list[str]:
    """Wait until every effect has its undo, at most ``timeout`` seconds; what still stands then."""
    with _changed:
        _changed.wait_for(lambda: not left_standing(_ledger), timeout)
        return left_standing(_ledger)


@compensator(UNDO_HANDLER)
def undo(ref: str, idempotency_key: str | None = None) -> None:
    """The registered inverse of every conformance tool."""
    note(f"undo:{ref}")


def undo_of(result: Any) -> Compensation:
    """The undo of a conformance tool, built from its result (so known only after the call)."""
    return Compensation(fn=undo, handler=UNDO_HANDLER, kwargs={"ref": result["ref"]})


@dataclass(frozen=True)
class Call:
    """One tool call the scripted model makes (one per model turn, or all in one response)."""

    tool: str
    args: dict[str, Any]


def root_cause(err: BaseException) -> BaseException:
    """The innermost cause, through SagaAborted / ToolFailed and a framework's own wrapping."""
    while True:
        if isinstance(err, (SagaAborted, ToolFailed)):
            err = err.cause
        elif err.__cause__ is not None:
            err = err.__cause__
        else:
            return err


def _fallback(*args: Any, **kwargs: Any) -> None:
    """A step's fallback that does nothing (a value for ``fallback_action``)."""


def every_step_option(*, policy_args: dict[str, str], **given: Any) -> dict[str, Any]:
    """One value other than the default for each step option; ``given`` replaces any of them.

    ``policy_args`` names the tool's own arguments. A step option this does not know fails
    here, so a new option is checked by every front door that takes these values at once.
    """
    values: dict[str, Any] = {
        "compensate": Compensation(fn=undo, handler=UNDO_HANDLER, kwargs={"ref": "known"}),
        "retry": RetryPolicy(max_attempts=2, base_delay=0),
        "timeout": 30.0,
        "fallback_action": _fallback,
        "inline": True,
        "require_boundary": True,
        "policy_args": policy_args,
        "reveal": frozenset({"api_key"}),
        "wait_for_commit": True,
        "origin": "probe",
        "reconcile": ReconcilePolicy(delay=0, attempts=1),
        "record_result": "shape",
        "not_applied_on": (LookupError,),
    }
    assert set(values) == option_names(), "a new step option needs a value in every_step_option"
    assert set(given) <= set(values), f"not step options: {sorted(set(given) - set(values))}"
    return {**values, **given}


def spy_on_steps(monkeypatch: pytest.MonkeyPatch) -> list[StepOptions]:
    """The options of every step the engine runs from now on in the test, in order."""
    seen: list[StepOptions] = []
    original = Saga._step

    def spy(saga: Saga, tool: str, forward: Any, args: Any, options: StepOptions, *rest: Any) -> Any:
        seen.append(options)
        return original(saga, tool, forward, args, options, *rest)

    monkeypatch.setattr(Saga, "_step", spy)
    return seen


def assert_wrap_tool_hook(framework: str, tool: Any, step: str, *, name: str | None = None, plain: Any = None) -> Any:
    """The adapter's ``wrap_tool`` plugin hook wraps ``tool`` and passes on what is not its framework's.

    ``tool`` comes back the same type, a step named ``step`` (``name``, when given, is the name
    the hook is asked for); an object, and ``plain`` (a plain function, where the framework's
    tools are not plain functions), get None. Returns the wrapped tool for the adapter's own checks.
    """
    adapter = importlib.import_module(f"agent_saga_{framework}").adapter
    plugins().register(adapter, framework)
    options = StepOptions(ActionSemantics.REVERSIBLE)
    wrapped = plugins().wrap_tool(tool, options, name)
    assert type(wrapped) is type(tool)
    spec = adapter.spec_of(wrapped)
    assert spec is not None, f"{framework}'s adapter does not know the tool its hook wrapped"
    assert spec.name == step
    if plain is not None:
        assert plugins().wrap_tool(plain, options) is None  # plain functions: only agent_saga.wrap_tool
    assert plugins().wrap_tool(object(), options) is None
    return wrapped
