"""LlamaIndex ``FunctionTool``s as saga steps, an agent run as one saga.

``wrap_tool`` builds a new ``FunctionTool`` over the step made of the tool's own
function, with the original metadata (name, description, ``fn_schema``), callbacks and
partial parameters. The step sits inside the tool, so it sees the raw exception that
LlamaIndex's agents turn into an ``is_error`` output for the model. ``patch_all()``
patches ``FunctionTool.call`` / ``acall``, where agents call a tool; the undo reads the
function's own result from ``ToolOutput.raw_output``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from llama_index.core.tools import FunctionTool

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_llamaindex import _compat

__all__ = ["LlamaIndex", "adapter", "saga_run"]


class LlamaIndex(Adapter):
    framework = "llamaindex"
    distribution = "agent-saga-llamaindex"
    tool_types = (FunctionTool,)
    hint = "make one with FunctionTool.from_defaults(fn)"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.real_fn  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> Collection[str]:
        return _compat.context_params(fn)

    def tool_name(self, tool: Any) -> str:
        return str(tool.metadata.name or getattr(tool.real_fn, "__name__", "tool"))

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        # LlamaIndex derives the other face (sync or async) from the one it is given.
        fn = tool.real_fn
        face = "async_fn" if inspect.iscoroutinefunction(fn) else "fn"
        return type(tool)(
            metadata=tool.metadata, partial_params=dict(tool.partial_params),
            **{face: self.step(spec, fn)}, **_compat.callbacks(tool),
        )

    def patch(self) -> None:
        self.patches.apply(FunctionTool, "call", lambda original: wrapt.FunctionWrapper(original, self._call))
        self.patches.apply(FunctionTool, "acall", lambda original: wrapt.FunctionWrapper(original, self._acall))

    def _call(self, wrapped: Any, tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tool is None:
            return wrapped(*args, **kwargs)
        return self.patched_sync(tool, lambda: wrapped(*args, **kwargs), _logged(tool, args, kwargs), raw=_raw)

    async def _acall(self, wrapped: Any, tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tool is None:
            return await wrapped(*args, **kwargs)
        return await self.patched_async(tool, lambda: wrapped(*args, **kwargs), _logged(tool, args, kwargs), raw=_raw)


def _logged(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k != tool.ctx_param_name}
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


def _raw(output: Any) -> Any:
    """The function's own result inside the ``ToolOutput`` that ``call`` / ``acall`` return."""
    return getattr(output, "raw_output", output)


adapter = LlamaIndex()


async def saga_run(
    agent: Any, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """``await agent.run(**run)`` (e.g. ``user_msg=...``) as one transaction.

    LlamaIndex's agents turn a tool exception into an ``is_error`` result and let the
    model carry on; the failed step is UNKNOWN all the same, so when the run returns
    the helper fails it (``ToolFailed``) and everything is undone newest-first. Inside
    an open saga the run joins it.
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        return await agent.run(**run)
