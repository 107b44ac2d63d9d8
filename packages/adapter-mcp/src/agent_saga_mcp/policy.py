"""The tool policy as the MCP proxy reads it: the core's format, checked against a real server.

The file is the core's tool policy (``agent_saga.plugins.policy``, same JSON Schema). What
the proxy adds is checking it against the tool surface the server actually lists: a
compensating tool must exist and accept the mapped arguments (their names, and their types:
see :mod:`agent_saga_mcp.fit`), and every path (``policy_args``, ``$args`` references)
must be able to resolve in a call's arguments. Errors name the entry and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_saga import ActionSemantics, Compensation, StepOptions
from agent_saga.plugins.policy import CompensateRule, JsonPath, PolicyError, ToolPolicy, ToolRule
from agent_saga.registry import registered
from agent_saga_mcp.compat import ToolInfo
from agent_saga_mcp.document import result_document, schema_misses
from agent_saga_mcp.fit import misfit

__all__ = ["CALL_TOOL_HANDLER", "ORIGIN", "McpPolicy", "PolicyError"]

# The registered handler every compensating tool call is recorded under (see handler.py).
CALL_TOOL_HANDLER = "mcp.call_tool"
#: The ``origin`` of every step and refusal the MCP client wrapper and the proxy record.
ORIGIN = "mcp"


@dataclass(frozen=True)
class McpPolicy:
    """A validated tool policy plus the MCP-specific checks and builders."""

    policy: ToolPolicy

    @classmethod
    def load(cls, source: str | os.PathLike[str] | Mapping[str, Any] | ToolPolicy) -> McpPolicy:
        """Read and check what can be checked without the server (PolicyError names the entry)."""
        policy = ToolPolicy.load(source)
        for rule in policy.rules:
            undo = rule.compensate
            if undo is not None and undo.tool is None and not registered(undo.handler):
                raise PolicyError(
                    f"{policy.source}: tools[{rule.pattern!r}].compensate.handler {undo.handler!r} is not "
                    "registered in this process; pass --import MODULE naming the module that declares it "
                    "with @compensator, or use compensate.tool to call a tool of the server"
                )
        return cls(policy)

    @property
    def enforce(self) -> bool:
        return self.policy.mode == "enforce"

    def rule_for(self, tool: str) -> ToolRule | None:
        return self.policy.rule_for(tool)

    def check_surface(self, tools: Mapping[str, ToolInfo], reserved: Iterable[str] = ()) -> list[str]:
        """Check the policy against the server's tools; return warnings, raise PolicyError on errors."""
        src = self.policy.source
        for name in reserved:
            if name in tools:
                raise PolicyError(
                    f"the server lists a tool named {name!r}, which --boundary explicit reserves for the "
                    "proxy; run with another --boundary"
                )
        warnings = []
        for rule in self.policy.rules:
            if not rule.is_glob and rule.pattern not in tools:
                warnings.append(f"{src}: tools[{rule.pattern!r}] names no tool this server lists")
        for info in tools.values():
            found = self.rule_for(info.name)
            if found is None:
                continue
            rule = found
            where = f"{src}: tools[{rule.pattern!r}]" + ("" if rule.pattern == info.name else f" (for {info.name!r})")
            for key, text in rule.policy_args.items():
                miss = schema_misses(info.input_schema, JsonPath.parse(text))
                if miss is not None:
                    raise PolicyError(
                        f"{where}.policy_args[{key!r}] cannot resolve in the tool's arguments: {miss}; "
                        "policy_args paths read the call's arguments"
                    )
            if rule.compensate is not None:
                _check_undo(where, info, rule.compensate, tools)
        return warnings

    def step_options(self, rule: ToolRule, undo: Callable[[Any], Compensation | None] | None) -> StepOptions:
        """The StepOptions of a call under ``rule``: its semantics and ``policy_args``, origin ``mcp``.

        ``undo`` (a factory over the call's result, see :meth:`undo`) is the step's
        ``compensate`` when the rule declares one. The engine reads ``policy_args`` from the
        call's arguments for the gate and the log, and refuses the call (``STEP_REFUSED``,
        rule ``policy_args``) when a path does not resolve in them.
        """
        return StepOptions(
            rule.semantics, compensate=undo if rule.compensate is not None else None,
            policy_args=dict(rule.policy_args), origin=ORIGIN,
        )

    def undo(
        self, tool: str, rule: ToolRule, arguments: Mapping[str, Any] | None, server: str | None
    ) -> Callable[[Mapping[str, Any] | None], Compensation | None]:
        """The undo factory of one call of ``tool`` with ``arguments``: wire result -> Compensation.

        Its ``$args`` references are read now, before the call: StepRefused (rule
        ``policy.compensate.args``) when one does not resolve. The factory returns None
        while the result is unknown, if the undo reads it.

        ``server`` is the server's *name* (None: unnamed, undoable only in this process): a
        ``compensate.tool`` undo is recorded as ``mcp.call_tool`` with that name, never with
        a command, and whoever runs it looks the name up in its own configuration.
        """
        undo = rule.compensate
        bound = undo.bind(rule.pattern, arguments) if undo is not None else None

        def build(result: Mapping[str, Any] | None) -> Compensation | None:
            if undo is None or bound is None or rule.semantics is ActionSemantics.IRREVERSIBLE:
                return None
            if result is None and bound.template.needs_result:
                return None
            mapped = bound.arguments(result_document(result) if result is not None else None)
            if undo.tool is None:
                return Compensation(handler=undo.handler, kwargs=mapped)
            return Compensation(
                handler=CALL_TOOL_HANDLER,
                kwargs={"server": server, "tool": undo.tool, "arguments": mapped},
                description=f"{undo.tool}({', '.join(f'{k}={v!r}' for k, v in mapped.items())})",
            )

        return build


def _check_undo(where: str, info: ToolInfo, undo: CompensateRule, tools: Mapping[str, ToolInfo]) -> None:
    """Check the undo of ``info``'s entry against the server's tools (PolicyError naming ``where``)."""
    target = tools.get(undo.tool) if undo.tool is not None else None
    if undo.tool is not None and target is None:
        known = ", ".join(sorted(tools)) or "none"
        raise PolicyError(
            f"{where}.compensate.tool {undo.tool!r} is not a tool of this server (it lists: {known}); "
            "fix the name, or the undo could never run"
        )
    for at, path in undo.template.references():
        source = info.output_schema if path.reads_result else info.input_schema
        miss = schema_misses(source, path)
        if miss is not None:
            reads = "declared output" if path.reads_result else "arguments"
            raise PolicyError(f"{where}.compensate.args{at} cannot resolve in {info.name!r}'s {reads}: {miss}")
    if target is None:  # a handler: nothing of the server to fit
        return
    props = (target.input_schema or {}).get("properties")
    if isinstance(props, Mapping):
        unknown = sorted(set(undo.args) - set(props))
        if unknown:
            raise PolicyError(
                f"{where}.compensate.args names {unknown}, which {undo.tool!r} does not take "
                f"(it takes: {', '.join(sorted(props)) or 'nothing'})"
            )
    required = (target.input_schema or {}).get("required") or []
    missing = sorted(str(r) for r in required if r not in undo.args)
    if missing:
        raise PolicyError(f"{where}.compensate.args does not give {undo.tool!r} its required {missing}")
    miss = misfit(undo.template.tree, info, target.name, target.input_schema)
    if miss is not None:
        raise PolicyError(f"{where}.compensate.args{miss}")
