"""Every touch of Agno beyond its documented API, in one place, checked at import.

* ``Function.entrypoint`` (a public field) on a *copy* of the tool (``model_copy``):
  ``wrap_tool`` puts the step there; the copy keeps every other field (hooks, confirmation,
  caching, instructions) and the parameter schema.
* ``Function._framework_params``: the parameters Agno fills itself (``agent``, ``team``,
  ``run_context``, media, ``_agno_*``, and anything annotated with those types), plus ``fc``
  (the ``FunctionCall``), which it injects by name; never the model's arguments, never logged.
  Read from ``Function.from_callable``, so Agno's own rule decides.
* ``Function.process_entrypoint`` and the classmethod ``Function.from_callable``: where an
  agent's run makes its own copy of each tool (a ``Function`` or ``Toolkit`` function, and a
  plain callable, respectively) ready to call; ``patch_all()`` polices that copy's entrypoint.
* ``Model.get_function_calls_to_run(assistant_message, messages, functions)``: where each of
  Agno's four model loops (``response`` / ``aresponse``, streamed or not) turns one model
  response's tool calls into the ``FunctionCall``s it is about to run, before any runs. Agno has
  no public hook that sees them all first (``tool_hooks`` wrap one call each, and ``arun`` runs
  a response's calls at once): the run helpers wrap this method (:func:`observe_planned`) the
  first time they run in a saga with a Speculator attached.

If the installed agno no longer looks like this, importing the adapter fails here, naming
the supported range, instead of patching the wrong thing.
"""

from __future__ import annotations

import copy
import functools
import inspect
import threading
from collections.abc import Callable, Iterable
from typing import Any

from agno.models.base import Model
from agno.tools.function import Function

from agent_saga.adapter import check_compat

__all__ = ["context_params", "observe_planned", "owned_params", "with_entrypoint"]

#: Injected by name although not in Agno's list of framework parameters.
_BY_NAME = frozenset({"fc"})


def context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` that Agno fills (its agent, run context, media, ``fc``)."""
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()
    owned = set(Function.from_callable(fn)._framework_params or ()) | (_BY_NAME & names)
    return tuple(sorted(owned & names))


def owned_params(tool: Function) -> frozenset[str]:
    """What Agno fills of a prepared tool's entrypoint (read from the tool: no new ``Function``)."""
    fn = tool.entrypoint
    try:
        names = set(inspect.signature(fn).parameters) if fn is not None else set()
    except (TypeError, ValueError):
        names = set()
    return frozenset((set(tool._framework_params or ()) | _BY_NAME) & names)


def with_entrypoint(tool: Function, fn: Callable[..., Any]) -> Function:
    """A copy of ``tool`` (same class, name, description, parameters, hooks) that calls ``fn``."""
    fresh = tool.model_copy()
    fresh.entrypoint = fn
    # model_copy shares these; processing a tool writes into them (its schema, the user's answers).
    fresh.parameters = copy.deepcopy(tool.parameters)
    fresh.user_input_schema = copy.deepcopy(tool.user_input_schema)
    fresh._framework_params = None if tool._framework_params is None else set(tool._framework_params)
    return fresh


#: Set on the wrapper :func:`observe_planned` puts on ``Model``: the method it wraps.
_PLANNED_ATTR = "__saga_planned__"
_PLANNED_LOCK = threading.Lock()


def observe_planned(name: Callable[[Iterable[tuple[str, Any]]], object]) -> None:
    """Have every Agno model hand each response's calls to ``name`` before it runs them (once per process).

    ``name`` gets ``(tool name, arguments)`` pairs; it is the adapter's ``planned``, which costs
    a context-variable read when the saga has no Speculator.
    """
    with _PLANNED_LOCK:
        original = Model.__dict__["get_function_calls_to_run"]
        if getattr(original, _PLANNED_ATTR, None) is not None:
            return

        @functools.wraps(original)
        def get_function_calls_to_run(model: Model, *args: Any, **kwargs: Any) -> Any:
            calls = original(model, *args, **kwargs)
            if calls:
                name((call.function.name, call.arguments or {}) for call in calls)
            return calls

        setattr(get_function_calls_to_run, _PLANNED_ATTR, original)
        Model.get_function_calls_to_run = get_function_calls_to_run  # type: ignore[method-assign,assignment]


def _fits() -> bool:
    def probe(amount: int, run_context: Any = None) -> int:
        """Probe."""
        return amount

    made = Function.from_callable(probe)
    processed = Function(name="probe", entrypoint=probe)
    processed.process_entrypoint()
    return (
        context_params(probe) == ("run_context",)
        and list(made.parameters["properties"]) == ["amount"]
        and processed._framework_params == {"run_context"}
        and callable(processed.entrypoint)
        and isinstance(inspect.getattr_static(Function, "from_callable"), classmethod)
        and list(inspect.signature(Model.__dict__["get_function_calls_to_run"]).parameters)
        == ["self", "assistant_message", "messages", "functions"]
    )


check_compat(
    "agent-saga-agno", "agno", _fits,
    "the installed agno no longer has Function.entrypoint, Function._framework_params, "
    "Function.process_entrypoint, the classmethod Function.from_callable or Model.get_function_calls_to_run",
)
