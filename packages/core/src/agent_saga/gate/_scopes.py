"""How a limit splits its window: one shared total, or one per tool, per argument value, ...

A scope maps a step request to a key; each key gets its own window. A scope that
cannot compute its key (``by_arg("customer_id")`` on a call without a
``customer_id``) raises :class:`MissingScope`, and the limit refuses the call:
a per-customer cap that lets anonymous calls through caps nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError

__all__ = ["MissingScope", "Scope", "by_arg", "by_tool", "combine", "everything"]

Scope = Callable[[StepRequest], str]


class MissingScope(LookupError):
    """The request lacks what the scope splits by."""


def everything(request: StepRequest) -> str:
    """One window for every call (the default scope)."""
    return "*"


def by_tool(request: StepRequest) -> str:
    """One window per tool name."""
    return f"tool={request.tool}"


def by_arg(name: str) -> Scope:
    """One window per value of argument ``name``."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"by_arg() needs an argument name, e.g. by_arg('customer_id'), got {name!r}")

    def scope(request: StepRequest) -> str:
        if name not in request.args:
            raise MissingScope(f"the call has no argument {name!r} to split the limit by")
        # JSON keeps 1 and "1" apart, and is stable for nested values.
        value = json.dumps(request.args[name], sort_keys=True, default=repr)
        return f"{name}={value}"

    scope.__name__ = f"by_arg({name!r})"
    return scope


def combine(*scopes: Scope) -> Scope:
    """One window per combination, e.g. ``combine(by_tool, by_arg("customer_id"))``."""
    if not scopes or not all(callable(s) for s in scopes):
        raise ConfigurationError(f"combine() needs scopes such as by_tool or by_arg('x'), got {scopes!r}")

    def scope(request: StepRequest) -> str:
        return "&".join(s(request) for s in scopes)

    scope.__name__ = "combine(" + ", ".join(getattr(s, "__name__", "?") for s in scopes) + ")"
    return scope
