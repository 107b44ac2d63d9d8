"""Every touch of AG2 beyond its documented API, in one place, checked at import.

* ``Tool._func`` (``Tool.func``): ``wrap_tool`` puts the step there on a copy of the tool
  (the constructor would inject again, losing ChatContext parameters, a custom schema and a
  subclass's state).
* ``Tool._chat_context_param_names``: the chat's values AG2 passes ``Tool.func`` by keyword
  although its signature hides them; never the model's arguments, never logged.
* ``ConversableAgent._run_async_in_thread``: a sync chat runs an async tool there, on a new
  thread with an empty context; importing the adapter makes it carry the saga.
* ``ConversableAgent.hook_lists`` (each hookable method's hooks, in order): the run helpers add
  ``PlannedCalls`` with the public ``register_hook`` and take it off that list when the chat
  ends (:func:`unregister_hook`; AG2 has no public way to).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any

import wrapt
from autogen import ConversableAgent
from autogen.tools import Tool
from autogen.tools.dependency_injection import ChatContext

from agent_saga.adapter import carry, check_compat, signature_of

__all__ = ["context_params", "function_of", "hooks", "named_context", "unregister_hook", "with_function"]


def function_of(tool: Tool) -> Callable[..., Any]:
    return tool._func


def with_function(tool: Tool, fn: Callable[..., Any]) -> Tool:
    """A copy of ``tool`` (same class, name, description, schema) that calls ``fn``."""
    fresh = copy.copy(tool)
    fresh._func = fn
    return fresh


def context_params(tool: Tool) -> list[str]:
    return list(tool._chat_context_param_names)


def named_context(tool: Tool) -> Callable[..., Any]:
    """``tool``'s function with its ChatContext parameters named again (keyword-only, annotated)."""
    func, names, signature = function_of(tool), context_params(tool), signature_of(function_of(tool))
    if not names or signature is None:
        return func
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=ChatContext) for n in names]
    named = functools.partial(func)
    named.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=sorted([*signature.parameters.values(), *extra], key=lambda p: p.kind))
    return named


def hooks(agent: ConversableAgent, method: str) -> list[Callable[..., Any]]:
    """The hooks registered for ``method`` on ``agent``, in order."""
    return list(agent.hook_lists.get(method, ()))


def unregister_hook(agent: ConversableAgent, method: str, hook: Callable[..., Any]) -> None:
    """Take ``hook`` (added with ``register_hook``) off ``agent``'s hooks for ``method``."""
    agent.hook_lists[method].remove(hook)


def _carrying(wrapped: Any, agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (coro,) = args

    async def run() -> Any:
        return await coro

    return wrapped(carry(run)())


def _fits() -> bool:
    tool = Tool(func_or_tool=lambda x: x)
    return (
        tool.func is function_of(tool) and context_params(tool) == []
        and callable(vars(ConversableAgent).get("_run_async_in_thread"))
    )


check_compat(
    "agent-saga-ag2", "ag2", _fits,
    "the installed ag2 no longer has Tool._func, Tool._chat_context_param_names "
    "or ConversableAgent._run_async_in_thread",
)
wrapt.wrap_function_wrapper(ConversableAgent, "_run_async_in_thread", _carrying)
