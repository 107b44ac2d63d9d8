"""Repair once: a malformed call gets its validation errors and one more try, then the saga ends.

``RepairPolicy(schemas={tool: schema})`` is given to the gate
(``PreFlightGate(repair=...)``). For a tool it knows, the gate checks each call's
arguments against the tool's schema before anything else is spent. The first
malformed call of that tool in a saga is refused with :class:`RepairRequested`: the
engine records ACTION_REPAIR_REQUESTED, the run is not failed, and the framework gives
the errors to the model as the tool's error result. A later malformed call of the
same tool in the same saga is refused with :class:`SagaStopped` (rule ``repair``): the
saga is rolled back, the earlier steps undone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError, RepairRequested, SagaStopped
from agent_saga.runtime._sagas import PerSaga
from agent_saga.runtime._schema import ArgumentCheck, argument_check

__all__ = ["RepairPolicy"]


class RepairPolicy:
    """Check each call of the named tools against its schema; ``repairs`` tries per tool and saga.

    ``schemas`` maps a tool's name to anything :func:`argument_check` reads: the tool
    function, a pydantic model class, a JSON Schema dict or the framework tool. Tools
    not named pass unchecked (the gate cannot know a schema it was not given).
    """

    rule = "repair"

    def __init__(self, schemas: Mapping[str, Any], *, repairs: int = 1, keep: int = 4096) -> None:
        if not isinstance(schemas, Mapping) or not schemas:
            raise ConfigurationError(
                f"RepairPolicy(schemas=...) needs a mapping of tool name to schema, e.g. {{'charge': charge}}, got {schemas!r}"
            )
        if isinstance(repairs, bool) or not isinstance(repairs, int) or repairs < 0:
            raise ConfigurationError(f"RepairPolicy(repairs=...) is how many tries a malformed call gets (0 or more), got {repairs!r}")
        self.checks: dict[str, ArgumentCheck] = {}
        for tool, schema in schemas.items():
            if not isinstance(tool, str) or not tool:
                raise ConfigurationError(f"RepairPolicy(schemas=...) is keyed by tool name, got {tool!r}")
            self.checks[tool] = argument_check(schema)
        self.repairs = repairs
        self._spent: PerSaga[dict[str, int]] = PerSaga(dict, keep)

    def errors(self, tool: str, args: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``args`` for ``tool`` (empty when they fit, or the tool is not known)."""
        check = self.checks.get(tool)
        return check(args) if check is not None else []

    def check(self, request: StepRequest) -> None:
        args = request.args
        if request.policy_args:  # policy_args values are the gate's reading of the call, not arguments
            args = {k: v for k, v in args.items() if k not in request.policy_args}
        errors = self.errors(request.tool, args)
        if not errors:
            return
        with self._spent.lock:
            spent = self._spent.get(request.saga_id)
            used = spent.get(request.tool, 0)
            spent[request.tool] = used + 1
        if used < self.repairs:
            raise RepairRequested(request.tool, tuple(errors), self.rule)
        raise SagaStopped(
            request.tool,
            f"malformed again after {used} repair{'s' if used != 1 else ''}: " + "; ".join(errors),
            self.rule, "malformed",
            ({"step": request.step, "tool": request.tool, "args": dict(request.args)},),
        )

    def __repr__(self) -> str:
        return f"RepairPolicy(tools={sorted(self.checks)}, repairs={self.repairs})"
