"""Every touch of CrewAI beyond its documented API, in one place, checked at import.

* A ``BaseTool`` subclass implements ``_run`` (and may implement ``_arun``); CrewAI
  calls them as ``self._run`` / ``self._arun``, from ``run`` / ``arun`` and as the
  ``func`` of the ``CrewStructuredTool`` it builds for each execution
  (``to_structured_tool``). ``wrap_tool`` puts the step there on a copy of the tool,
  as an instance attribute pydantic does not manage (:func:`bind`).
* ``CrewStructuredTool._original_tool`` (private): the tool a structured tool was made
  from, so that a patched call of either is one step of that tool (:func:`origin_of`).

If the installed CrewAI no longer looks like this, importing the adapter fails here,
naming the supported range, instead of wrapping something CrewAI no longer calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool
from crewai.tools.structured_tool import CrewStructuredTool

from agent_saga.adapter import check_compat

__all__ = ["ENTRY_POINTS", "bind", "origin_of"]

#: Where CrewAI calls a tool: (class, sync entry, async entry). ``patch_all()`` patches all six.
ENTRY_POINTS: tuple[tuple[type[Any], str, str], ...] = (
    (BaseTool, "run", "arun"), (Tool, "run", "arun"), (CrewStructuredTool, "invoke", "ainvoke"),
)


def bind(tool: BaseTool, attr: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` what ``tool.<attr>`` (``_run`` / ``_arun``) calls, on this instance only."""
    object.__setattr__(tool, attr, fn)


def origin_of(tool: Any) -> Any:
    """The ``BaseTool`` a ``CrewStructuredTool`` was made from; any other tool is its own origin."""
    return getattr(tool, "_original_tool", None) or tool


def _fits() -> bool:
    class Probe(BaseTool):
        name: str = "probe"
        description: str = "Probe."

        def _run(self, text: str) -> str:
            return text

    probe = Probe().model_copy()
    bind(probe, "_run", lambda text: f"bound {text}")
    structured = probe.to_structured_tool()
    return (
        probe.run(text="a") == "bound a" and structured.invoke({"text": "b"}) == "bound b"
        and origin_of(structured) is probe
        and all(callable(getattr(cls, s, None)) and callable(getattr(cls, a, None)) for cls, s, a in ENTRY_POINTS)
    )


check_compat(
    "agent-saga-crewai", "crewai", _fits,
    "the installed crewai no longer calls a tool's own _run from run() and from the CrewStructuredTool "
    "it builds (to_structured_tool, _original_tool)",
)
