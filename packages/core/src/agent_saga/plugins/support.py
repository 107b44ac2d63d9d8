"""What every framework adapter needs, written once.

Adapters use these through the adapter kit (:mod:`agent_saga.adapter`, whose ``Adapter``
base class calls them); adapters not yet ported to the kit still import them from here.

* :func:`step_sync` / :func:`step_async` — run one tool call through a ToolSpec as a step
  of the current saga (the engine tells observers and remembers failures).
* :func:`patched_sync` / :func:`patched_async` — what a patched runtime does with a call:
  explicit wrap wins, then the policy, then unclassified handling.
* :func:`run_boundary` — one saga around one agent run (a :class:`~agent_saga.context.Boundary`
  that joins an open saga and fails a run that swallowed a tool's failure).
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent_saga.context import Boundary, current_saga
from agent_saga.engine.saga import Saga
from agent_saga.errors import StepRefused, ToolFailed
from agent_saga.log.base import WAL
from agent_saga.toolspec import SPEC_ATTR, ToolSpec

__all__ = [
    "SPEC_ATTR",
    "ToolFailed",
    "failures",
    "patched_async",
    "patched_sync",
    "run_boundary",
    "step_async",
    "step_sync",
    "with_origin",
]

# Which patched call is already a step on this path: a framework's async entry may fall
# back to its own sync entry (on a worker thread that copies the context), and one call
# must be one step, not two.
_stepping: contextvars.ContextVar[int | None] = contextvars.ContextVar("agent_saga_stepping", default=None)


def failures(saga: Saga) -> tuple[tuple[str, BaseException], ...]:
    """Tool failures seen inside ``saga`` (tool name, exception), oldest first."""
    return saga.failures


def with_origin(spec: ToolSpec, framework: str) -> ToolSpec:
    """``spec`` marked as called by ``framework`` (for observers and the log), unless it names an origin."""
    if spec.options.origin is not None:
        return spec
    return dataclasses.replace(spec, options=spec.options.with_changes(origin=framework))


def step_sync(
    spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], framework: str
) -> Any:
    """``fn(*args, **kwargs)`` as a step of the current saga (straight through outside one)."""
    return with_origin(spec, framework).call_sync(fn, args, kwargs)


async def step_async(
    spec: ToolSpec,
    fn: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    framework: str,
) -> Any:
    """``await fn(*args, **kwargs)`` as a step of the current saga (straight through outside one)."""
    return await with_origin(spec, framework).call_async(fn, args, kwargs)


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

    return step_sync(spec, forward, (), dict(tool_args), framework)


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

    return await step_async(spec, forward, (), dict(tool_args), framework)


def run_boundary(wal: WAL | None = None, *, name: str = "agent-run", **options: Any) -> Boundary:
    """One saga around one agent run (``with`` or ``async with``).

    Inside an already-open saga it joins that saga (the outer boundary owns the
    rollback). When the run returns but a tool failed inside it, :class:`ToolFailed`
    is raised inside the boundary, so the run is unwound and ``SagaAborted`` raised.
    """
    return Boundary(wal, name=name, join=True, fail_on_swallowed=True, **options)


def refuse(tool: str, framework: str, tool_args: Mapping[str, Any], refused: StepRefused) -> StepRefused:
    """Record ``refused`` as a refused step of the current saga (if any) and return it to raise."""
    saga = current_saga()
    if saga is not None:
        saga.refuse(tool, tool_args, refused, origin=framework)
    return refused
