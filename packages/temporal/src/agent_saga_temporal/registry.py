"""Named forward effects and invariants, for the worker's activities to find.

Undo handlers and reconcilers are the core's (``@compensator``, ``@reconciler``):
one vocabulary for both engines. What the core has no registry for is a forward
effect called by name from another process, and an invariant: they live here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agent_saga import ConfigurationError

__all__ = ["Verdict", "effect", "effect_for", "invariant", "invariant_for"]

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_effects: dict[str, Callable[..., Any]] = {}
_invariants: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True)
class Verdict:
    """An invariant's answer with its reason. ``holds=None`` is "could not tell"."""

    holds: bool | None
    detail: str = ""


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _registrar(table: dict[str, Callable[..., Any]], what: str, name: str) -> Callable[[F], F]:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"@{what} needs a non-empty name, got {name!r}")

    def register(fn: F) -> F:
        if not callable(fn):
            raise ConfigurationError(f"@{what}({name!r}) must decorate a callable")
        with _lock:
            existing = table.get(name)
            # The same function again (a module reloaded) is fine; another one would make
            # the worker run whichever module was imported last.
            if existing is not None and _qualname(existing) != _qualname(fn):
                raise ConfigurationError(
                    f"{what} name {name!r} is already registered to {_qualname(existing)}; "
                    f"{_qualname(fn)} cannot reuse it"
                )
            table[name] = fn
        return fn

    return register


def effect(name: str) -> Callable[[F], F]:
    """Register ``fn`` as the forward effect a step names (``tool:`` in saga.yaml, else its name).

    It is called with the step's arguments, plus ``idempotency_key`` if it takes one
    (the same key on every run of that step: pass it to the provider). Raise
    :class:`agent_saga.NotApplied` when the effect certainly did not happen; any
    other exception means "may have landed", and the step's ``@reconciler`` is asked.
    """
    return _registrar(_effects, "effect", name)


def invariant(name: str) -> Callable[[F], F]:
    """Register ``fn`` as a check of the world that must hold for the job to count as done.

    Called as ``fn(facts, results)`` (``results`` maps each done step to its result);
    returns True, False, None (could not tell) or a :class:`Verdict`. It must read
    the systems afresh: the job is ``succeeded_verified`` only when every one holds.
    """
    return _registrar(_invariants, "invariant", name)


def effect_for(name: str) -> Callable[..., Any] | None:
    return _effects.get(name)


def invariant_for(name: str) -> Callable[..., Any] | None:
    return _invariants.get(name)
