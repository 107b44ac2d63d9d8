"""Carrying the caller's context onto AutoGen's executor threads.

``FunctionTool.run`` runs a sync function with ``loop.run_in_executor(None, ...)``,
which does not copy the context: on that thread ``current_saga()`` is None, and a
step inside the function would run unprotected. Both the wrapped tool and the
patched runtime take a copy of the context *on the event loop*, where the saga is
current, and run the function inside that copy on the worker thread.

A copy per call: one ``Context`` cannot be entered on two threads at once, and a
copy keeps the function's own ``ContextVar.set()`` calls from leaking into the
executor thread's next task.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["in_callers_context"]


def in_callers_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` bound to a copy of the current context; call this on the event loop."""
    return functools.partial(contextvars.copy_context().run, fn)
