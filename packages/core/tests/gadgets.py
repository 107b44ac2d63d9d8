"""A framework written for the tests, and its adapter on the kit: a ``Gadget`` is a named function.

Enough of a framework for the kit's planned calls and the top-level ``wrap_tool`` to be
checked with no real framework installed (``test_adapter_kit.py`` has a fuller one: a run
context, a runtime to patch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agent_saga.adapter import Adapter, ToolSpec


@dataclasses.dataclass(frozen=True)
class Gadget:
    """A framework's tool: a name and the function behind it."""

    name: str
    fn: Callable[..., Any]


class Gadgets(Adapter):
    framework = "gadgets"
    distribution = "agent-saga-gadgets"
    tool_types = (Gadget,)

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.fn  # type: ignore[no-any-return]

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return dataclasses.replace(tool, fn=self.step(spec, tool.fn))
