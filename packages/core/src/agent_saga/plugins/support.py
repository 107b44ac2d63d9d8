"""What a patched framework runtime does with one tool call, written once.

The adapter kit's :meth:`~agent_saga.adapter.Adapter.patched_sync` /
:meth:`~agent_saga.adapter.Adapter.patched_async` call these (after letting a tool from
``wrap_tool`` call through): the tool policy of ``patch_all`` decides whether the call is a
step, an unclassified call, or a refusal.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent_saga.toolspec import ToolSpec

__all__ = ["patched_async", "patched_sync"]

# Which patched call is already a step on this path: a framework's async entry may fall
# back to its own sync entry (on a worker thread that copies the context), and one call
# must be one step, not two.
_stepping: contextvars.ContextVar[int | None] = contextvars.ContextVar("agent_saga_stepping", default=None)


def _with_origin(spec: ToolSpec, framework: str) -> ToolSpec:
    """``spec`` marked as called by ``framework`` (for observers and the log), unless it names an origin."""
    if spec.options.origin is not None:
        return spec
    return dataclasses.replace(spec, options=spec.options.with_changes(origin=framework))


def _classified(tool: str, framework: str, identity: int, tool_args: Mapping[str, Any]) -> ToolSpec | None:
    from agent_saga.plugins.patching import classify

    if _stepping.get() == identity:
        return None  # the outer entry of this same call is already the step
    return classify(tool, framework, tool_args)


def _on_raw(spec: ToolSpec, raw: Callable[[Any], Any] | None) -> ToolSpec:
    """``spec`` whose undo reads ``raw(result)``: the function's own return value, when
    the patched entry point hands back the framework's wrapper object around it."""
    factory = spec.options.compensate
    if raw is None or not callable(factory):
        return spec

    def on_raw(result: Any) -> Any:
        return factory(raw(result))

    return dataclasses.replace(spec, options=spec.options.with_changes(compensate=on_raw))


def patched_sync(
    tool: str,
    framework: str,
    identity: int,
    call: Callable[[], Any],
    tool_args: Mapping[str, Any],
    raw: Callable[[Any], Any] | None = None,
) -> Any:
    """Run a patched runtime's sync call ``call()`` of ``tool`` (already-wrapped tools excluded).

    ``raw`` extracts the tool function's own result from what ``call()`` returns.
    """
    spec = _classified(tool, framework, identity, tool_args)
    if spec is None:
        return call()
    spec = _on_raw(spec, raw)

    def forward(**_logged: Any) -> Any:
        token = _stepping.set(identity)
        try:
            return call()
        finally:
            _stepping.reset(token)

    return _with_origin(spec, framework).call_sync(forward, (), dict(tool_args))


async def patched_async(
    tool: str,
    framework: str,
    identity: int,
    call: Callable[[], Awaitable[Any]],
    tool_args: Mapping[str, Any],
    raw: Callable[[Any], Any] | None = None,
) -> Any:
    """The awaiting form of :func:`patched_sync`."""
    spec = _classified(tool, framework, identity, tool_args)
    if spec is None:
        return await call()
    spec = _on_raw(spec, raw)

    async def forward(**_logged: Any) -> Any:
        token = _stepping.set(identity)
        try:
            return await call()
        finally:
            _stepping.reset(token)

    return await _with_origin(spec, framework).call_async(forward, (), dict(tool_args))
