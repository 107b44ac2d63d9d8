"""The declarative tool policy: which tool is what, written in a file a reviewer can sign off.

::

    {"mode": "enforce",
     "tools": {"stripe_charge": {"semantics": "COMPENSABLE",
                                 "compensate": {"handler": "stripe.refund",
                                                "args": {"charge_id": "$.id"}}},
               "search_*": {"semantics": "REVERSIBLE"}}}

Instead of a ``handler``, ``compensate`` may name a ``tool``: another tool of the same
server, called with the mapped arguments. Only the MCP proxy (``agent-saga mcp``, in
``agent-saga-mcp``) can make such a call; in-process runtimes refuse the step before it runs.

A name matches exactly, else the first glob (in file order) that matches it. In
``compensate.args`` every string that starts with ``$``, at any depth (inside lists and
objects too), is a reference (:class:`~agent_saga.jsonpath.ArgTemplate`):

* ``$.id``, ``$.items[0].id``, ``$['odd key']``: a JSON path into the forward result;
* ``$.items[*].id``: the array of every item's ``id``;
* ``$args.path``: a JSON path into the call's own arguments (read before the call runs);
* ``$$...``: the literal string with one ``$`` less.

Anything else is passed as is. A path that cannot be read refuses the policy when it is
loaded, naming the entry and where the path is. The handler must be registered with
``@compensator`` by the time it is needed.

Semantics are never inferred: a tool the policy does not name is *unclassified*.
``observe`` mode lets it run (and records it); ``enforce`` mode refuses it before it runs.
The JSON Schema of this format ships as ``tool-policy.schema.json`` beside this module.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

from agent_saga.errors import CompensationError, ConfigurationError, StepRefused
from agent_saga.jsonpath import ArgTemplate, JsonPath, Unresolved
from agent_saga.semantics import ActionSemantics, json_roundtrips
from agent_saga.toolspec import ToolSpec

__all__ = [
    "CompensateRule",
    "JsonPath",
    "PolicyError",
    "PolicyUndo",
    "ToolPolicy",
    "ToolRule",
    "policy_schema",
]

Mode = Literal["observe", "enforce"]
_MODES = ("observe", "enforce")
_ENTRY_KEYS = {"semantics", "compensate", "description", "policy_args"}
_COMPENSATE_KEYS = {"handler", "tool", "args"}
_TOP_KEYS = {"mode", "tools", "$schema", "version"}


class PolicyError(ConfigurationError):
    """A tool policy is malformed; the message names the entry and how to fix it."""


@dataclass(frozen=True, slots=True)
class CompensateRule:
    """The undo of one tool: a registered handler (or a server tool) and where its arguments come from.

    ``args`` is kept as written; ``template`` is it parsed (every reference, at any depth).
    """

    handler: str
    args: Mapping[str, Any] = field(default_factory=dict)
    tool: str | None = None  # an MCP tool to call instead of a handler (then handler is "")
    template: ArgTemplate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "template", ArgTemplate.parse(dict(self.args)))

    def bind(self, entry: str, call_args: Mapping[str, Any] | None) -> PolicyUndo:
        """The undo of one call under the policy entry ``entry``, its ``$args`` read now, before the call.

        StepRefused (rule ``policy.compensate.args``) when one does not resolve in
        ``call_args`` (None: not known): the call would leave an undo that cannot be built.
        """
        template = self.template
        if template.needs_args:
            try:
                template = template.bind_args(call_args)
            except Unresolved as miss:
                raise StepRefused(
                    entry,
                    f"tool policy entry {entry!r}: compensate.args{miss.where} = {miss.path.text!r} does not "
                    f"resolve in the call's arguments ({miss.why}), so the call would have no undo; it was not made",
                    rule="policy.compensate.args",
                ) from None
        return PolicyUndo(entry, self.handler, template)


@dataclass(frozen=True, slots=True)
class PolicyUndo:
    """The undo a policy entry declares for one call, built from the forward result.

    Its ``$args`` references are already read, so when none reads the result it is
    known before the call (and can undo a step whose outcome is UNKNOWN).
    """

    entry: str
    handler: str
    template: ArgTemplate

    @property
    def known_before_call(self) -> bool:
        return not self.template.needs_result

    @property
    def recipe(self) -> dict[str, Any]:
        """How to build the undo from a result, as :func:`agent_saga.registry.from_recipe` reads it.

        An argument without a reference is a literal, one that is a reference is a path; one
        with references inside it (a list, an object) is a template in its written form.
        """
        literals: dict[str, Any] = {}
        paths: dict[str, str] = {}
        templates: dict[str, Any] = {}
        for name, value in self.template.tree.items():
            part = ArgTemplate(value)
            if isinstance(value, JsonPath):
                paths[name] = value.text
            elif part.references():
                templates[name] = part.written()
            else:
                literals[name] = value
        recipe: dict[str, Any] = {"handler": self.handler, "literals": literals, "paths": paths}
        if templates:
            recipe["templates"] = templates
        return recipe

    def arguments(self, result: Any) -> dict[str, Any]:
        """The undo's arguments read from ``result``; CompensationError naming the entry and the path."""
        try:
            return cast(dict[str, Any], self.template.resolve(result))
        except Unresolved as miss:
            raise CompensationError(
                f"tool policy entry {self.entry!r}: compensate.args{miss.where} = {miss.path.text!r} does not "
                f"resolve in the forward result ({miss.why}); fix the path or the tool"
            ) from None

    def __call__(self, result: Any) -> dict[str, Any]:
        return {"handler": self.handler, "kwargs": self.arguments(result)}


@dataclass(frozen=True, slots=True)
class ToolRule:
    """One entry of the policy."""

    pattern: str
    semantics: ActionSemantics
    compensate: CompensateRule | None = None
    description: str = ""
    policy_args: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_glob(self) -> bool:
        return any(ch in self.pattern for ch in "*?[")

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"semantics": self.semantics.value}
        if self.compensate is not None:
            undo = self.compensate
            entry["compensate"] = (
                {"tool": undo.tool, "args": dict(undo.args)} if undo.tool is not None
                else {"handler": undo.handler, "args": dict(undo.args)}
            )
        if self.description:
            entry["description"] = self.description
        if self.policy_args:
            entry["policy_args"] = dict(self.policy_args)
        return entry


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """A validated tool policy. Build it with :meth:`load`, :meth:`from_dict` or :meth:`from_file`."""

    mode: Mode = "observe"
    rules: tuple[ToolRule, ...] = ()
    source: str = "<policy>"

    @classmethod
    def load(cls, value: ToolPolicy | Mapping[str, Any] | str | os.PathLike[str] | None) -> ToolPolicy:
        """Accept a policy, a dict, or the path of a JSON file; None is an empty observe policy."""
        if value is None:
            return cls()
        if isinstance(value, ToolPolicy):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        if isinstance(value, (str, os.PathLike)):
            return cls.from_file(value)
        raise PolicyError(
            f"a tool policy is a ToolPolicy, a dict or the path of a JSON file, got {type(value).__name__}"
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ToolPolicy:
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except OSError as err:
            raise PolicyError(f"cannot read tool policy {str(where)!r}: {err.strerror or err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise PolicyError(
                f"tool policy {str(where)!r} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
            ) from None
        return cls.from_dict(data, source=str(where))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<policy>") -> ToolPolicy:
        if not isinstance(data, Mapping):
            raise PolicyError(f"{source}: a tool policy is a JSON object with 'mode' and 'tools', got {type(data).__name__}")
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise PolicyError(f"{source}: unknown top-level keys {unknown}; allowed: 'mode', 'tools'")
        mode = data.get("mode", "observe")
        if mode not in _MODES:
            raise PolicyError(f"{source}: mode must be 'observe' or 'enforce', got {mode!r}")
        tools = data.get("tools", {})
        if not isinstance(tools, Mapping):
            raise PolicyError(f"{source}: 'tools' must map tool names (or globs) to entries, got {type(tools).__name__}")
        rules = tuple(_rule(source, name, entry) for name, entry in tools.items())
        return cls(mode, rules, source)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "tools": {r.pattern: r.to_dict() for r in self.rules}}

    def rule_for(self, tool: str) -> ToolRule | None:
        """The entry for ``tool``: its exact name, else the first matching glob."""
        for rule in self.rules:
            if not rule.is_glob and rule.pattern == tool:
                return rule
        for rule in self.rules:
            if rule.is_glob and fnmatch.fnmatchcase(tool, rule.pattern):
                return rule
        return None

    def spec_for(self, tool: str, args: Mapping[str, Any] | None = None) -> ToolSpec | None:
        """The ToolSpec the policy gives a call of ``tool`` with ``args``, or None when it is unclassified.

        Raises StepRefused for an entry whose undo is a server tool (``compensate.tool``):
        only the MCP proxy can call one, so in process the effect would have no undo; and
        for an undo whose ``$args`` references do not resolve in ``args`` (None: not known).
        """
        rule = self.rule_for(tool)
        if rule is None:
            return None
        undo = rule.compensate
        if undo is not None and undo.tool is not None:
            raise StepRefused(
                tool,
                f"tool policy entry {tool!r}: compensate.tool = {undo.tool!r} names a server tool, which only "
                "the MCP proxy (agent-saga mcp) can call; in process, use compensate.handler with a function "
                "registered with @compensator",
                rule="policy.compensate.tool",
            )
        return ToolSpec.of(
            tool, semantics=rule.semantics, compensate=undo.bind(tool, args) if undo is not None else None,
            policy_args=dict(rule.policy_args),
        )

    @staticmethod
    def skeleton(tools: list[str] | tuple[str, ...]) -> dict[str, Any]:
        """A policy naming ``tools``, every one IRREVERSIBLE with a TODO for a reviewer.

        Nothing is guessed: a reviewer downgrades what is safe; the file never upgrades itself.
        """
        return {
            "mode": "enforce",
            "tools": {
                name: {"semantics": "IRREVERSIBLE", "description": "TODO: classify (REVERSIBLE / COMPENSABLE + compensate)"}
                for name in sorted(set(tools))
            },
        }


def _rule(source: str, name: Any, entry: Any) -> ToolRule:
    where = f"{source}: tools[{name!r}]"
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{source}: a tool name must be a non-empty string, got {name!r}")
    if not isinstance(entry, Mapping):
        raise PolicyError(f"{where} must be an object like {{\"semantics\": \"REVERSIBLE\"}}, got {entry!r}")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown keys {unknown}; allowed: {sorted(_ENTRY_KEYS)}")
    if "semantics" not in entry:
        raise PolicyError(
            f"{where} has no 'semantics': say REVERSIBLE, COMPENSABLE or IRREVERSIBLE "
            "(agent-saga never guesses whether an effect can be undone)"
        )
    if entry["semantics"] not in {m.value for m in ActionSemantics}:
        raise PolicyError(
            f"{where}: semantics {entry['semantics']!r} is not one of REVERSIBLE, COMPENSABLE, "
            "IRREVERSIBLE (upper case, as in the JSON Schema)"
        )
    semantics = ActionSemantics(entry["semantics"])
    compensate = _compensate(where, entry.get("compensate"))
    if semantics is ActionSemantics.IRREVERSIBLE and compensate is not None:
        raise PolicyError(f"{where} is IRREVERSIBLE but has 'compensate': an effect that can be undone is COMPENSABLE")
    if semantics is ActionSemantics.COMPENSABLE and compensate is None:
        raise PolicyError(
            f"{where} is COMPENSABLE but has no 'compensate': add "
            "{\"handler\": \"registered.name\", \"args\": {\"param\": \"$.field\"}}"
        )
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise PolicyError(f"{where}: 'description' must be a string")
    policy_args = entry.get("policy_args", {})
    if not isinstance(policy_args, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in policy_args.items()
    ):
        raise PolicyError(f"{where}: 'policy_args' must map names to JSON paths like \"$.amount\"")
    for key, value in policy_args.items():
        _path(f"{where}.policy_args[{key!r}]", value)
    return ToolRule(name, semantics, compensate, description, dict(policy_args))


def _compensate(where: str, value: Any) -> CompensateRule | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}.compensate must be an object {{\"handler\": ..., \"args\": {{...}}}}, got {value!r}")
    unknown = sorted(set(value) - _COMPENSATE_KEYS)
    if unknown:
        raise PolicyError(f"{where}.compensate: unknown keys {unknown}; allowed: 'handler', 'tool', 'args'")
    handler = value.get("handler")
    undo_tool = value.get("tool")
    if handler is not None and undo_tool is not None:
        raise PolicyError(
            f"{where}.compensate has both 'handler' and 'tool': name one undo, a registered handler or a server tool"
        )
    if undo_tool is not None:
        if not isinstance(undo_tool, str) or not undo_tool.strip():
            raise PolicyError(f"{where}.compensate.tool must be the name of a tool of the same server, got {undo_tool!r}")
    elif not isinstance(handler, str) or not handler.strip():
        raise PolicyError(
            f"{where}.compensate needs 'handler' (the name of a function registered with @compensator) "
            "or, behind the MCP proxy, 'tool' (a tool of the same server)"
        )
    args = value.get("args", {})
    if not isinstance(args, Mapping) or not all(isinstance(k, str) and k for k in args):
        raise PolicyError(f"{where}.compensate.args must map the handler's parameter names to values or JSON paths")
    for key, arg in args.items():
        if not json_roundtrips(arg):
            raise PolicyError(f"{where}.compensate.args[{key!r}] must be JSON data or a '$' path, got {arg!r}")
    try:
        return CompensateRule(cast(str, handler) if undo_tool is None else "", dict(args), undo_tool)
    except ValueError as err:  # a reference that cannot be read, wherever it is
        raise PolicyError(f"{where}.compensate.args{err} (literal text that starts with '$' is written '$$...')") from None


def _path(where: str, text: str) -> JsonPath:
    try:
        return JsonPath.parse(text)
    except ValueError as err:
        raise PolicyError(f"{where}: {err}") from None


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file format (shipped with the core package)."""
    text = resources.files("agent_saga.plugins").joinpath("tool-policy.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
