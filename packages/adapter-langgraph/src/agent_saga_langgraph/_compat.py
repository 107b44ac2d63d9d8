"""Every touch of LangChain beyond its documented API, in one place, checked at import.

* ``StructuredTool._run`` / ``_arun`` and ``Tool._run`` / ``_arun`` (protected): where a
  function-backed tool calls its function with the parsed arguments. ``patch_all()``
  patches them, so a step sees the function's raw result and raw exception.
* Their keyword-only ``config`` and ``run_manager``, and the ``callbacks`` LangChain
  hands a function that names it: values of the run, not the model's arguments.

If the installed langchain-core no longer looks like this, importing the adapter fails
here, naming the supported range, instead of patching the wrong thing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolArg, StructuredTool, Tool

from agent_saga.adapter import check_compat

__all__ = ["FUNCTION_TOOLS", "RUN_KEYWORDS", "framework_params"]

#: The tool classes whose ``func`` / ``coroutine`` is the tool (``@tool`` makes them).
FUNCTION_TOOLS: tuple[type[StructuredTool | Tool], ...] = (StructuredTool, Tool)
#: Keywords ``_run`` / ``_arun`` receive that are not the tool's arguments.
RUN_KEYWORDS = frozenset({"config", "run_manager", "callbacks"})


def framework_params(fn: Callable[..., Any]) -> frozenset[str]:
    """Parameters of a tool function that LangChain fills, not the model.

    ``callbacks`` (by name), a ``RunnableConfig`` (by type) and anything annotated as
    injected (``InjectedToolArg`` and its kinds: LangGraph's state, store, tool call id).
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: LangChain cannot inject by type either
        hints = {}
    names = {"callbacks"} & set(inspect.signature(fn).parameters)
    for name, hint in hints.items():
        if hint is RunnableConfig or any(
            isinstance(meta, InjectedToolArg) or (isinstance(meta, type) and issubclass(meta, InjectedToolArg))
            for meta in typing.get_args(hint)[1:]
            if typing.get_origin(hint) is typing.Annotated
        ):
            names.add(name)
    return frozenset(names)


def _fits() -> bool:
    # vars(cls).get: the class itself must define them (None, a TypeError below, if not)
    return all(
        {"func", "coroutine"} <= set(cls.model_fields)
        and all(
            {"config", "run_manager"} <= set(inspect.signature(vars(cls).get(attr)).parameters)  # type: ignore[arg-type]
            for attr in ("_run", "_arun")
        )
        for cls in FUNCTION_TOOLS
    )


check_compat(
    "agent-saga-langgraph", "langgraph", _fits,
    "langchain-core's StructuredTool / Tool no longer have func/coroutine fields, or their own "
    "_run / _arun(*args, config, run_manager, **kwargs) has changed",
)
