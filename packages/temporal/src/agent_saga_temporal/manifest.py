"""``saga.yaml``: a job described in a file, checked against the published JSON Schema.

Every problem is reported with the file and line it is on, all at once, before any
workflow starts: a schema violation, a duplicated key (YAML would silently keep the
last one), a step that waits for an unknown step or for itself, a reference that
names nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from agent_saga import ActionSemantics, ConfigurationError
from agent_saga_temporal.model import (
    FINISH,
    JobSpec,
    Limits,
    StepSpec,
    UndoSpec,
    Unresolvable,
    references,
    resolve_refs,
)

__all__ = ["ManifestError", "check_job", "load_manifest", "parse_manifest", "schema"]


class ManifestError(ConfigurationError):
    """A manifest that cannot be run; ``problems`` holds one ``file:line: what`` line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems:\n  " + "\n  ".join(problems)
        super().__init__(head)


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of saga.yaml (``agent_saga_temporal/saga.schema.json``)."""
    text = resources.files("agent_saga_temporal").joinpath("saga.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def load_manifest(path: str | Path) -> JobSpec:
    """Read, check and convert a saga.yaml; :class:`ManifestError` names every problem's line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ManifestError([f"{path}: cannot read it: {err.strerror or err}"]) from None
    return parse_manifest(text, source=str(path))


def parse_manifest(text: str, *, source: str = "saga.yaml", numbered: bool = True) -> JobSpec:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise ManifestError([f"{where}: not valid YAML: {getattr(err, 'problem', None) or err}"]) from None
    if root is None or not isinstance(data, dict):
        raise ManifestError([f"{source}:1: a manifest is a mapping with name, goal, steps and invariants"])
    lines = _Lines(root, source, numbered)
    problems = [*lines.duplicates(), *_not_json(data, [], lines)]
    validator = jsonschema.Draft202012Validator(schema())
    for error in sorted(validator.iter_errors(data), key=lambda e: (lines.line(e.absolute_path), e.message)):
        problems.append(f"{lines.at(error.absolute_path)}: {_where(error.absolute_path)}{_message(error)}")
    if not problems:
        problems.extend(_references(data, lines))
    if problems:
        raise ManifestError(problems)
    return _job(data)


def check_job(job: JobSpec) -> JobSpec:
    """Hold a job built in code to the manifest's rules (schema and references); return it."""
    data = dataclasses.asdict(job)
    for step in data["steps"]:
        for key in ("tool", "description", "undo"):
            if not step[key]:
                del step[key]
    # JSON is YAML: the same checks, with paths instead of lines.
    return parse_manifest(json.dumps({"version": 1, **data}), source=f"job {job.name!r}", numbered=False)


def _where(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"{text}: " if text else ""


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "required" and list(error.absolute_path)[:1] == ["steps"] and "undo" in error.message:
        return "a COMPENSABLE step needs undo: {handler: <a @compensator>, args: {...}}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {})) if isinstance(error.schema, Mapping) else []
        return f"{error.message} (allowed here: {', '.join(allowed)})"
    if error.validator == "not" and list(error.absolute_path)[-1:] == ["name"]:
        return "'finish' is reserved: it is the choice that ends a job"
    return error.message


class _Lines:
    """Where each value of the document is, from PyYAML's node tree."""

    def __init__(self, root: yaml.Node, source: str, numbered: bool = True) -> None:
        self.root = root
        self.source = source
        self.numbered = numbered

    def node(self, path: Any) -> yaml.Node:
        node = self.root
        for part in path:
            child = None
            if isinstance(node, yaml.MappingNode):
                child = next((v for k, v in node.value if k.value == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                child = node.value[part]
            if child is None:
                break
            node = child
        return node

    def line(self, path: Any) -> int:
        return int(self.node(path).start_mark.line) + 1

    def at(self, path: Any) -> str:
        return f"{self.source}:{self.line(path)}" if self.numbered else self.source

    def duplicates(self) -> Iterator[str]:
        stack = [self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                seen: set[str] = set()
                for key, value in node.value:
                    if key.value in seen:
                        where = f"{self.source}:{key.start_mark.line + 1}" if self.numbered else self.source
                        yield (f"{where}: key {key.value!r} appears twice "
                               "in one mapping (YAML would keep only the last)")
                    seen.add(key.value)
                    stack.append(value)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)


def _not_json(value: Any, path: list[Any], lines: _Lines) -> Iterator[str]:
    # YAML reads 2024-05-01 as a date and !!binary as bytes; neither travels as JSON.
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                yield f"{lines.at(path)}: {_where(path)}key {key!r} is not text: quote it"
            else:
                yield from _not_json(item, [*path, key], lines)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _not_json(item, [*path, i], lines)
    elif not isinstance(value, (str, int, float, bool, type(None))) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        yield f"{lines.at(path)}: {_where(path)}{type(value).__name__} {str(value)!r} is not JSON: quote it"


def _references(data: dict[str, Any], lines: _Lines) -> Iterator[str]:
    """What the schema cannot say: names that must exist, orders that must be possible."""
    steps = data["steps"]
    facts = data.get("facts", {})
    names: dict[str, int] = {}
    finish = data.get("finish", FINISH)
    for i, step in enumerate(steps):
        if step["name"] in names:
            yield f"{lines.at(['steps', i, 'name'])}: steps[{i}].name: step {step['name']!r} is already defined"
        elif step["name"] == finish:
            yield (f"{lines.at(['steps', i, 'name'])}: steps[{i}].name: {finish!r} is this job's finishing "
                   "choice (finish:); name the step otherwise")
        names.setdefault(step["name"], i)
    for i, step in enumerate(steps):
        for j, before in enumerate(step.get("after", [])):
            if before not in names:
                yield f"{lines.at(['steps', i, 'after', j])}: steps[{i}].after: no step is named {before!r}"
            elif before == step["name"]:
                yield f"{lines.at(['steps', i, 'after', j])}: steps[{i}].after: a step cannot wait for itself"
        for ref in references(step.get("args", {})):
            problem = _check_ref(ref, {"facts": facts})
            if problem:
                yield f"{lines.at(['steps', i, 'args'])}: steps[{i}].args: {problem}"
        undo = step.get("undo")
        if undo:
            # $result is only known at run time; $args and $facts can be checked now.
            sources = {"facts": facts, "args": step.get("args", {})}
            for ref in references(undo.get("args", {})):
                problem = "" if ref.startswith("$result.") or ref == "$result" else _check_ref(ref, sources)
                if problem:
                    yield f"{lines.at(['steps', i, 'undo', 'args'])}: steps[{i}].undo.args: {problem}"
    cycle = _cycle(steps)
    if cycle:
        first = names[cycle[0]]
        yield f"{lines.at(['steps', first])}: steps[{first}]: the 'after' orders form a cycle ({' -> '.join(cycle)}), so none can run"


def _check_ref(ref: str, sources: dict[str, Any]) -> str:
    head = ref[1:].split(".", 1)[0]
    if head not in sources:
        allowed = ", ".join(f"${s}." for s in sources)
        return f"{ref} refers to nothing here (use {allowed}..., or $$ for a literal $)"
    try:
        resolve_refs(ref, sources)
    except Unresolvable as err:
        return str(err)
    return ""


def _cycle(steps: list[dict[str, Any]]) -> list[str]:
    after = {s["name"]: [a for a in s.get("after", []) if a != s["name"]] for s in steps}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, trail: list[str]) -> list[str]:
        if state.get(name) == 2 or name not in after:
            return []
        if state.get(name) == 1:
            return [*trail[trail.index(name):], name]
        state[name] = 1
        for before in after[name]:
            found = visit(before, [*trail, name])
            if found:
                return found
        state[name] = 2
        return []

    for name in after:
        found = visit(name, [])
        if found:
            return found
    return []


def _job(data: dict[str, Any]) -> JobSpec:
    steps = []
    for step in data["steps"]:
        undo = step.get("undo")
        steps.append(StepSpec(
            name=step["name"],
            semantics=ActionSemantics.parse(step["semantics"]).value,
            tool=step.get("tool", ""),
            description=step.get("description", ""),
            args=dict(step.get("args", {})),
            after=list(step.get("after", [])),
            undo=UndoSpec(undo["handler"], dict(undo.get("args", {}))) if undo else None,
        ))
    limits = Limits(**data.get("limits", {}))
    return JobSpec(
        name=data["name"], goal=data["goal"], steps=steps, invariants=list(data["invariants"]),
        facts=dict(data.get("facts", {})), limits=limits, tags=list(data.get("tags", [])),
        finish=data.get("finish", FINISH),
    )
