"""Vertex AI (and the Gemini Developer API) through google-genai: AFC's Python tools as saga steps.

``wrap_tool`` takes the plain Python function automatic function calling (AFC) is given in
``GenerateContentConfig(tools=[...])`` and returns a function with the same name, signature,
annotations and docstring (so the SDK declares it to the model exactly as before) whose every
call is a step. ``patch_all()`` polices the two functions through which the SDK calls a tool
(``_compat``): every Python tool of every client, chat and model call is classified by the
tool policy. The SDK turns a tool's exception into an ``{"error": ...}`` function response and
the model goes on; the step still fails, and the run helpers then unwind the run.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Awaitable, Callable
from typing import Any

from google import genai
from google.genai import chats
from google.genai.client import AsyncClient

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, StepOptions, ToolSpec, split_saga_options
from agent_saga_vertex import _compat

__all__ = ["Vertex", "adapter", "saga_run", "saga_run_sync"]

SyncInvoke = Callable[[dict[str, Any], Callable[..., Any]], Any]
AsyncInvoke = Callable[[dict[str, Any], Callable[..., Any]], Awaitable[Any]]


class Vertex(Adapter):
    framework = "vertex"
    distribution = "agent-saga-vertex"
    tool_types = (types.FunctionType, types.MethodType)
    hint = "automatic function calling takes plain Python functions: pass the function itself"

    def recognises(self, tool: Any) -> bool:
        return inspect.isfunction(tool) or inspect.ismethod(tool)

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool  # type: ignore[no-any-return]

    def tool_name(self, tool: Any) -> str:
        return str(tool.__name__)  # what the SDK declares it as, and looks the model's call up by

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return self.step(spec, tool)

    def agent_saga_wrap_tool(self, tool: Any, options: StepOptions, name: str | None) -> Any | None:
        # Not a hook implementation here (no @hookimpl, so pluggy does not register it): a plain
        # function belongs to no framework, and agent_saga.wrap_tool keeps pointing it at
        # @agent_saga.tool (which AFC takes as well) instead of this adapter claiming them all.
        return None

    def patch(self) -> None:
        module = _compat.invokers()
        self.patches.apply(module, _compat.SYNC_INVOKE, self._policed_sync)
        self.patches.apply(module, _compat.ASYNC_INVOKE, self._policed_async)

    def _policed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # The SDK reads the signature and annotations of what it calls: the policed function keeps fn's.
        return fn if self.is_wrapped(fn) else self.policed_by_keyword(fn, fn, ())

    def _policed_sync(self, original: SyncInvoke) -> SyncInvoke:
        @functools.wraps(original)
        def invoke(args: dict[str, Any], function_to_invoke: Callable[..., Any]) -> Any:
            return original(args, self._policed(function_to_invoke))

        return invoke

    def _policed_async(self, original: AsyncInvoke) -> AsyncInvoke:
        @functools.wraps(original)
        async def invoke(args: dict[str, Any], function_to_invoke: Callable[..., Any]) -> Any:
            return await original(args, self._policed(function_to_invoke))

        return invoke


adapter = Vertex()

_ASYNC_TARGETS = "a genai.Client, its .aio (AsyncClient) or an AsyncChat (client.aio.chats.create(...))"
_SYNC_TARGETS = "a genai.Client or a Chat (client.chats.create(...))"


def _call_async(target: Any) -> Callable[..., Awaitable[Any]]:
    if isinstance(target, chats.AsyncChat):
        return target.send_message
    if isinstance(target, genai.Client):
        target = target.aio
    if isinstance(target, AsyncClient):
        return target.models.generate_content
    hint = "; for a Chat use saga_run_sync" if isinstance(target, chats.Chat) else ""
    raise TypeError(f"saga_run takes {_ASYNC_TARGETS}, got {type(target).__qualname__}{hint}")


def _call_sync(target: Any) -> Callable[..., Any]:
    if isinstance(target, chats.Chat):
        return target.send_message
    if isinstance(target, genai.Client):
        return target.models.generate_content
    hint = "; for an async client or chat use await saga_run" if isinstance(target, (AsyncClient, chats.AsyncChat)) else ""
    raise TypeError(f"saga_run_sync takes {_SYNC_TARGETS}, got {type(target).__qualname__}{hint}")


async def saga_run(target: Any, *, options: SagaOptions | None = None, **run: Any) -> Any:
    """One AFC run as one transaction: ``await client.aio.models.generate_content(**run)`` or ``await chat.send_message(**run)``.

    ``target``: a ``genai.Client`` (or its ``.aio``), with ``run`` what ``generate_content``
    takes (``model=``, ``contents=``, ``config=``); or an ``AsyncChat``, with ``message=`` (and
    ``config=``). The saga options (``wal=``, ``name=``, ``gate=``, ...) are taken out of ``run``
    first. The SDK hands a tool's exception to the model and goes on; when the call returns, the
    helper fails the run (``ToolFailed``) and everything is undone newest-first. Inside an open
    saga the run joins it.
    """
    saga, run = split_saga_options(run)
    call = _call_async(target)
    async with adapter.boundary(options=options, **saga):
        return await call(**run)


def saga_run_sync(target: Any, *, options: SagaOptions | None = None, **run: Any) -> Any:
    """The blocking form: ``client.models.generate_content(**run)`` or ``chat.send_message(**run)``.

    AFC in the blocking client takes sync functions only (the SDK refuses an async one before
    the first request).
    """
    saga, run = split_saga_options(run)
    call = _call_sync(target)
    with adapter.boundary(options=options, **saga):
        return call(**run)
