"""A model's call whose arguments do not fit the tool's function is a call that did nothing.

Python binds a call's arguments to the function's parameters before any line of its body
runs; a call that cannot be bound (a parameter the model made up, one it left out) raises
``TypeError`` there, so nothing happened. Raised inside a step, that ``TypeError`` would
leave the step UNKNOWN and the rollback not clean. The adapter kit checks the binding
first, the way Python would, and says ``NotApplied`` instead: the step is recorded as not
applied, and the function is not called. A ``TypeError`` from the function's own body is
untouched (it may come after an effect).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from agent_saga.errors import NotApplied

__all__ = ["refusing_unbound"]


def refusing_unbound(fn: Callable[..., Any], tool: str) -> Callable[..., Any]:
    """``fn`` (same shape, sync or async), raising NotApplied for a call its parameters cannot take."""
    try:
        # The callable's own parameters, not those of what it wraps: a decorator may take more.
        signature = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):  # no signature to check (some builtins): Python's own error stands
        return fn

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as err:
            raise NotApplied(f"the call of tool {tool!r} does not fit its parameters ({err}); the function "
                             "was not called") from err

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            bind(args, kwargs)
            return await fn(*args, **kwargs)

        return checked_async

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        bind(args, kwargs)
        return fn(*args, **kwargs)

    return checked
