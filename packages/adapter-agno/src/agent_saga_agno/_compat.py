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

If the installed agno no longer looks like this, importing the adapter fails here, naming
the supported range, instead of patching the wrong thing.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from agno.tools.function import Function

from agent_saga.adapter import check_compat

__all__ = ["context_params", "owned_params", "with_entrypoint"]

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
    )


check_compat(
    "agent-saga-agno", "agno", _fits,
    "the installed agno no longer has Function.entrypoint, Function._framework_params, "
    "Function.process_entrypoint or the classmethod Function.from_callable",
)
