"""Carrying the saga (and whatever plugins capture) across a hand-off to another thread.

Some runtimes run work on threads that do not inherit the caller's context (AutoGen's
sync ``FunctionTool`` uses ``run_in_executor`` without copying it; a job queue's worker
thread never saw the caller). :func:`carry` is called where the work is handed over:
every plugin's ``agent_saga_capture`` hook records what it needs (the core records the
current saga) and the returned callable re-establishes it around the call, wherever
that runs. A plugin adds a new hand-off point by calling ``carry`` there (from its
``agent_saga_patch``), without touching the core.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from agent_saga.plugins.manager import plugins

__all__ = ["carry"]

F = TypeVar("F", bound=Callable[..., Any])


def carry(fn: F) -> F:
    """``fn`` carrying what every plugin captures now (at least the current saga).

    Call it on the thread that hands the work over; call the result on any thread.
    Each call enters the captured state around ``fn`` and leaves the worker as it
    found it. An async ``fn`` is carried around its whole run, not only its creation.
    """
    attaches = plugins().capture()
    if not attaches:
        return fn

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def carried_async(*args: Any, **kwargs: Any) -> Any:
            with contextlib.ExitStack() as stack:
                for attach in attaches:
                    stack.enter_context(attach())
                return await fn(*args, **kwargs)

        return carried_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def carried(*args: Any, **kwargs: Any) -> Any:
        with contextlib.ExitStack() as stack:
            for attach in attaches:
                stack.enter_context(attach())
            return fn(*args, **kwargs)

    return carried  # type: ignore[return-value]
