"""Which call shapes had to be undone: lift over the base rate, with support, advisory only.

``FailureModel.fit(records, min_support=...)`` reads a log (the records of
``agent_saga.log.read_records`` or ``json.loads`` of each line of a FileWAL file),
folds it into sagas and steps with the fold the recovery daemon and ``graph`` use
(``agent_saga.recovery.fold``), and labels each executed step:

* UNDONE -- the step's own call failed: STEP_UNKNOWN, STEP_NOT_APPLIED, or a commit
  whose undo could not be built (``problem``). Its saga failed because of it.
* KEPT -- committed, and its saga completed without undoing it.
* excluded, and counted: COLLATERAL (a committed call rolled back because a later
  step failed: the call worked, so it is no evidence either way), UNRESOLVED (an
  intent with no outcome, or a commit in a saga that never ended: a crash), and
  REFUSED (the gate stopped it, so the world never judged it).

Each call is described by features of its logged (already redacted) arguments: the
presence or absence of an argument, a category (a bool, or a short string of an
argument with few distinct values), and a numeric magnitude bin. Bins are decades
(``[1e2, 1e3)``), fixed in advance rather than quantiles of the data: a quantile's
edge would be a value somebody typed, and decades stay put when the model is refit.

The base rate is **per tool**: a feature's rate of undone calls is compared with the
rate of its own tool, because tools fail at very different rates and a lift over
the overall rate would mostly rediscover which tool was called. Each tool is also
compared with the overall rate, as a finding of its own (feature ``tool``).

Below ``min_support`` calls a feature gets no number at all, and ``explain`` says
that this silence is not a clean bill of health. Nothing here refuses a step: the
gate rule of :meth:`FailureModel.advisory_rule` records the estimate as the step's
STEP_ADVISORY record, and :meth:`Finding.as_rule` gives an operator an ordinary rule
to install explicitly. A correlation is grounds to look, not to refuse.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.gate import Action, Condition, Rule
from agent_saga.inert import inert
from agent_saga.log.records import RecordType as R
from agent_saga.log.source import log_records
from agent_saga.recovery.fold import SagaView, StepView, fold

__all__ = ["Explanation", "FailureModel", "Feature", "Finding", "Silence", "label_steps"]

FORMAT = "agent-saga/failure-model"
VERSION = 1
#: A string argument with more distinct values than this (per tool) is described by its presence only.
MAX_CATEGORIES = 20
#: A string longer than this is never a category (it is text, not a choice).
MAX_CATEGORY_CHARS = 64
_SILENCE = "silence is not a clean bill of health"


@dataclass(frozen=True, slots=True)
class Feature:
    """One property of a call's arguments.

    ``kind``: ``tool`` (any call of the tool), ``present`` / ``absent`` (argument ``arg``),
    ``category`` (``arg`` equals ``value``), ``range`` (``arg`` is a number whose
    magnitude is in the decade ``[10**exp, 10**(exp+1))``, of sign ``value``: "+" / "-",
    or exactly zero when ``value`` is "0").
    """

    kind: str
    arg: str = ""
    value: Any = None
    exp: int = 0

    def matches(self, args: Mapping[str, Any]) -> bool:
        if self.kind == "tool":
            return True
        if self.kind == "absent":
            return self.arg not in args
        if self.arg not in args:
            return False
        if self.kind == "present":
            return True
        got = args[self.arg]
        if self.kind == "category":
            return bool(_category(got) == self.value)
        if self.kind == "range":
            return _decade(got) == (self.value, self.exp)
        return False

    def describe(self) -> str:
        """Inert text: argument names and categories came from the agent."""
        name = inert(self.arg)
        if self.kind == "tool":
            return "any call"
        if self.kind == "present":
            return f"has {name}"
        if self.kind == "absent":
            return f"no {name}"
        if self.kind == "category":
            return f"{name} = {inert(json.dumps(self.value, ensure_ascii=False))}"
        if self.value == "0":
            return f"{name} = 0"
        low, high = f"1e{self.exp}", f"1e{self.exp + 1}"
        return f"{name} in [{low}, {high})" if self.value == "+" else f"{name} in (-{high}, -{low}]"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "arg": self.arg, "value": self.value, "exp": self.exp}

    def sort_key(self) -> tuple[str, str, str, int]:
        # Categories mix bools and strings, which do not compare: order by their JSON.
        return (self.kind, self.arg, json.dumps(self.value), self.exp)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Feature:
        kind = data.get("kind")
        if kind not in ("tool", "present", "absent", "category", "range"):
            raise ValueError(f"not a failure-model feature kind: {kind!r}")
        return cls(str(kind), str(data.get("arg", "")), data.get("value"), int(data.get("exp", 0)))


def _category(value: Any) -> Any:
    """The category a value falls in, or None when it is not one (numbers have bins instead)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) <= MAX_CATEGORY_CHARS:
        return value
    return None


def _decade(value: Any) -> tuple[str, int] | None:
    """(sign, exponent) of a finite number's decade; ("0", 0) for zero; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    # Decimal holds a float or an int exactly, so its leading digit's exponent is the decade
    # with no rounding at the edges (log10 of 1e15 - 1 is not below 15) and no overflow.
    number = Decimal(value)
    if number == 0:
        return ("0", 0)
    exp = number.adjusted()
    return ("+" if number > 0 else "-", exp)


def _features(args: Mapping[str, Any], names: Iterable[str]) -> set[Feature]:
    """The features of one call; ``names`` are every argument name seen for its tool (for ``absent``)."""
    found = {Feature("tool")}
    for name in names:
        if name not in args:
            found.add(Feature("absent", name))
    for name, value in args.items():
        found.add(Feature("present", name))
        category = _category(value)
        if category is not None:
            found.add(Feature("category", name, category))
        decade = _decade(value)
        if decade is not None:
            found.add(Feature("range", name, decade[0], decade[1]))
    return found


# -- labels ----------------------------------------------------------------------------------

UNDONE, KEPT, COLLATERAL, UNRESOLVED, REFUSED = "UNDONE", "KEPT", "COLLATERAL", "UNRESOLVED", "REFUSED"


def _label(saga: SagaView, step: StepView) -> str:
    if step.refused and not step.intent:
        return REFUSED
    if step.unknown or step.not_applied or (step.committed and step.problem):
        return UNDONE  # the call itself failed (or left an effect nobody could undo by its record)
    if step.committed:
        if step.settled == "compensated":
            return COLLATERAL
        if saga.ended == R.SAGA_COMPLETED or step.settled == "kept":
            return KEPT
        if saga.ended == R.SAGA_ROLLED_BACK:
            return COLLATERAL  # rolled back with its saga, by whatever means the log shows
        return UNRESOLVED  # a saga that never ended: a crash; nobody knows yet whether it stands
    return UNRESOLVED  # an intent with no outcome


def label_steps(records: Iterable[Any]) -> list[tuple[str, int, str, dict[str, Any], str]]:
    """(saga id, step, tool, logged args, label) for every step of the log, in log order.

    ``records`` are decoded records (dicts) or the lines of a FileWAL file (str or bytes).
    """
    sagas = fold(log_records(records, caller="FailureModel.fit"))
    rows = []
    for saga in sagas.values():
        for index in sorted(saga.steps):
            step = saga.steps[index]
            if step.tool is None:
                continue
            rows.append((saga.saga_id, index, step.tool, dict(step.args or {}), _label(saga, step)))
    return rows


# -- findings ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """Calls of ``tool`` with ``feature``: ``undone`` of ``calls`` undone, against the base rate.

    The base is the tool's own calls (``base_undone`` of ``base_calls``), except for the
    ``tool`` feature, whose base is every scored call of every tool.
    """

    tool: str
    feature: Feature
    calls: int
    undone: int
    base_calls: int
    base_undone: int

    @property
    def rate(self) -> float:
        return self.undone / self.calls

    @property
    def base_rate(self) -> float:
        return self.base_undone / self.base_calls

    @property
    def lift(self) -> float | None:
        """rate / base rate; None when nothing in the base was undone (a ratio over zero)."""
        return self.rate / self.base_rate if self.base_undone else None

    @property
    def base(self) -> str:
        return "all tools" if self.feature.kind == "tool" else "the tool"

    def __str__(self) -> str:
        lift = "undefined (nothing in the base was undone)" if self.lift is None else f"{self.lift:.2f}"
        return (
            f"{inert(self.tool)} {self.feature.describe()}: {self.undone} of {self.calls} undone "
            f"({self.rate:.0%}) against {self.base_undone} of {self.base_calls} for {self.base} "
            f"({self.base_rate:.0%}): lift {lift}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool, "feature": self.feature.to_json(), "describe": self.feature.describe(),
            "calls": self.calls, "undone": self.undone, "base": self.base, "base_calls": self.base_calls,
            "base_undone": self.base_undone, "rate": self.rate, "base_rate": self.base_rate, "lift": self.lift,
        }

    def as_rule(self, then: Action | str = Action.BLOCK, name: str | None = None) -> Rule:
        """An ordinary gate rule matching this call shape; it does nothing until an operator installs it.

        ``PreFlightGate(rules=[finding.as_rule()])`` refuses (``then="approve"`` asks a human)
        every call of the tool with the feature, with this finding's numbers as the reason.
        """
        tool, feature = self.tool, self.feature

        def matches(request: Any) -> bool:
            return bool(request.tool == tool and feature.matches(request.args))

        when = Condition(matches, f"tool is {inert(tool)} and {feature.describe()}")
        return Rule(name or f"learned:{tool}:{feature.describe()}", when, then, f"learned from the log: {self}")


@dataclass(frozen=True, slots=True)
class Silence:
    """A feature of a call that matched, with too few calls behind it for any number."""

    tool: str
    feature: Feature
    calls: int
    needed: int

    def __str__(self) -> str:
        return (
            f"{inert(self.tool)} {self.feature.describe()}: {self.calls} scored call(s), fewer than "
            f"min_support={self.needed}: no estimate; {_SILENCE}"
        )

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "feature": self.feature.to_json(), "describe": self.feature.describe(),
                "calls": self.calls, "min_support": self.needed}


@dataclass(frozen=True, slots=True)
class Explanation:
    """What the model knows about one call: findings with numbers, and where it stays silent."""

    tool: str
    findings: tuple[Finding, ...]
    silent: tuple[Silence, ...]
    known: bool

    def __str__(self) -> str:
        lines = [str(f) for f in self.findings] + [str(s) for s in self.silent]
        if not self.known:
            lines.append(f"{inert(self.tool)}: no scored call of this tool in the log; {_SILENCE}")
        return "\n".join(lines)

    def to_note(self) -> dict[str, Any]:
        """The body of the STEP_ADVISORY note: advisory, with every number's support."""
        note: dict[str, Any] = {
            "advisory": "a learned estimate, not a verdict: nothing was refused because of it",
            "base": "per tool",
            "findings": [f.to_json() for f in self.findings],
            "silent": [s.to_json() for s in self.silent],
        }
        if not self.known:
            note["unknown_tool"] = True
        if self.silent or not self.known:
            note["silence"] = _SILENCE
        return note


@dataclass(slots=True)
class _ToolCounts:
    calls: int = 0
    undone: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    features: dict[Feature, list[int]] = field(default_factory=dict)  # feature -> [calls, undone]
    free_text: set[str] = field(default_factory=set)  # string arguments with too many values to be categories


class FailureModel:
    """Counts of undone calls by tool and call shape, read as lift over the tool's base rate.

    Build it with :meth:`fit` (or :meth:`load`); read it with :meth:`findings`,
    :meth:`explain`, or the gate rule :meth:`advisory_rule`.
    """

    def __init__(self, tools: Mapping[str, _ToolCounts], min_support: int) -> None:
        self.min_support = _check_support(min_support)
        self._tools = dict(tools)

    # -- building --------------------------------------------------------------------------

    @classmethod
    def fit(cls, records: Iterable[Any], min_support: int = 20) -> FailureModel:
        """Learn from a log's records (dicts, or the JSON lines of a FileWAL file)."""
        _check_support(min_support)
        rows = label_steps(records)
        names: dict[str, set[str]] = {}
        categories: dict[tuple[str, str], set[Any]] = {}
        for _saga, _index, tool, args, label in rows:
            if label in (UNDONE, KEPT):
                names.setdefault(tool, set()).update(args)
                for name, value in args.items():
                    category = _category(value)
                    if category is not None:
                        categories.setdefault((tool, name), set()).add(category)
        free = {key for key, seen in categories.items() if len(seen) > MAX_CATEGORIES}
        tools: dict[str, _ToolCounts] = {}
        for _saga, _index, tool, args, label in rows:
            counts = tools.setdefault(tool, _ToolCounts())
            counts.free_text.update(name for owner, name in free if owner == tool)
            if label not in (UNDONE, KEPT):
                counts.excluded[label] = counts.excluded.get(label, 0) + 1
                continue
            undone = label == UNDONE
            counts.calls += 1
            counts.undone += undone
            for feature in _features(args, names.get(tool, ())):
                if feature.kind == "category" and (tool, feature.arg) in free:
                    continue  # free text, not a choice: its presence says what can be said
                cell = counts.features.setdefault(feature, [0, 0])
                cell[0] += 1
                cell[1] += undone
        return cls(tools, min_support)

    # -- reading ---------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(sorted(self._tools))

    @property
    def calls(self) -> int:
        """Scored calls (UNDONE or KEPT) of every tool."""
        return sum(c.calls for c in self._tools.values())

    @property
    def undone(self) -> int:
        return sum(c.undone for c in self._tools.values())

    def excluded(self, tool: str) -> dict[str, int]:
        """How many steps of ``tool`` were left out, by reason (COLLATERAL, UNRESOLVED, REFUSED)."""
        counts = self._tools.get(tool)
        return dict(counts.excluded) if counts is not None else {}

    def _finding(self, tool: str, feature: Feature) -> Finding | Silence | None:
        counts = self._tools.get(tool)
        if counts is None:
            return None
        cell = counts.features.get(feature)
        if cell is None:
            return None
        calls, undone = cell
        if calls < self.min_support:
            return Silence(tool, feature, calls, self.min_support)
        if feature.kind == "tool":
            base_calls, base_undone = self.calls, self.undone
        else:
            base_calls, base_undone = counts.calls, counts.undone
        if base_calls < self.min_support:
            return Silence(tool, feature, base_calls, self.min_support)
        if feature.kind != "tool" and calls == base_calls:
            return None  # every call of the tool has it: its rate is the base rate, nothing learned
        return Finding(tool, feature, calls, undone, base_calls, base_undone)

    def findings(self, tool: str | None = None) -> list[Finding]:
        """Every finding with enough support (of ``tool``, or of all tools), highest lift first."""
        found = []
        for name in (self.tools if tool is None else (tool,)):
            counts = self._tools.get(name)
            for feature in sorted(counts.features, key=Feature.sort_key) if counts is not None else ():
                result = self._finding(name, feature)
                if isinstance(result, Finding):
                    found.append(result)
        return sorted(found, key=lambda f: (-(f.lift if f.lift is not None else -1.0), f.tool, f.feature.sort_key()))

    def explain(self, tool: str, args: Mapping[str, Any] | None = None) -> Explanation:
        """The findings that apply to this call, and the features it has that are too rare to count."""
        if not isinstance(tool, str):
            raise ConfigurationError(f"explain(tool, args) needs the tool's name as a str, got {tool!r}")
        args = dict(args or {})
        counts = self._tools.get(tool)
        if counts is None or counts.calls == 0:
            return Explanation(tool, (), (), False)
        findings: list[Finding] = []
        silent: list[Silence] = []
        for feature in sorted(counts.features, key=Feature.sort_key):
            if not feature.matches(args):
                continue
            result = self._finding(tool, feature)
            if isinstance(result, Finding):
                findings.append(result)
            elif isinstance(result, Silence):
                silent.append(result)
        for feature in sorted(_features(args, ()) - set(counts.features), key=Feature.sort_key):
            if feature.kind == "category" and feature.arg in counts.free_text:
                continue  # free text: a value never seen before is the rule there, not a shape
            # A shape never seen in a scored call: the plainest silence of all.
            silent.append(Silence(tool, feature, 0, self.min_support))
        return Explanation(tool, tuple(findings), tuple(silent), True)

    def advisory_rule(self, name: str = "failure-model") -> Rule:
        """A gate rule that records :meth:`explain`'s estimate for every step and never refuses.

        Install it as ``PreFlightGate(rules=[model.advisory_rule()], wal=log)``: each step
        gets a STEP_ADVISORY record (``body.note``) in ``log``, and the gate's verdict is
        what it would have been without the rule.
        """
        return Rule(
            name, Condition(lambda _request: True, "every step"), Action.ADVISE,
            "the failure model's estimate (advisory)",
            note=lambda request: self.explain(request.tool, request.args).to_note(),
        )

    def __str__(self) -> str:
        lines = [
            f"failure model: {self.undone} of {self.calls} scored calls undone; base rate per tool; "
            f"min_support={self.min_support}"
        ]
        lines += [str(f) for f in self.findings()]
        quiet = [t for t in self.tools if self._tools[t].calls < self.min_support]
        if quiet:
            lines.append(
                f"{len(quiet)} tool(s) with fewer than {self.min_support} scored calls: "
                f"{', '.join(inert(t) for t in quiet)}: no numbers; {_SILENCE}"
            )
        return "\n".join(lines)

    # -- JSON ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "min_support": self.min_support, "base": "per tool",
            "tools": {
                tool: {
                    "calls": c.calls, "undone": c.undone, "excluded": dict(sorted(c.excluded.items())),
                    "free_text": sorted(c.free_text),
                    "features": [
                        {"feature": f.to_json(), "calls": cell[0], "undone": cell[1]}
                        for f, cell in sorted(c.features.items(), key=lambda item: item[0].sort_key())
                    ],
                }
                for tool, c in sorted(self._tools.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureModel:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ConfigurationError(f"not a failure model (no \"format\": {FORMAT!r}): save one with model.save(path)")
        if data.get("version") != VERSION:
            raise ConfigurationError(f"failure model version {data.get('version')!r}; this agent-saga reads {VERSION}")
        tools: dict[str, _ToolCounts] = {}
        try:
            for tool, raw in data["tools"].items():
                counts = _ToolCounts(int(raw["calls"]), int(raw["undone"]),
                                     {str(k): int(v) for k, v in raw.get("excluded", {}).items()},
                                     free_text={str(n) for n in raw.get("free_text", [])})
                for entry in raw["features"]:
                    counts.features[Feature.from_json(entry["feature"])] = [int(entry["calls"]), int(entry["undone"])]
                tools[str(tool)] = counts
            return cls(tools, int(data["min_support"]))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ConfigurationError(f"a failure model's JSON is malformed ({type(err).__name__}: {err})") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FailureModel:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ConfigurationError(f"{path}: not JSON ({err}); save a failure model with model.save(path)") from None
        return cls.from_json(data)


def _check_support(min_support: Any) -> int:
    if isinstance(min_support, bool) or not isinstance(min_support, int) or min_support < 1:
        raise ConfigurationError(f"min_support must be a whole number of calls >= 1 (e.g. 20), got {min_support!r}")
    return min_support
