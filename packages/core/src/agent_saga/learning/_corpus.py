"""Training data labelled by reality: one example per executed step, labelled by its fate.

Every step the log shows a call for (an intent, a commit, an unknown or a not-applied
record) becomes one ``Example``. Its fate comes from the same fold the recovery daemon and
every picture use (``agent_saga.recovery.fold``); this module only reads the fate off it:

* ``KEPT`` — the call committed and nothing undid it: its saga completed, or its saga rolled
  back and the step was kept (nothing to undo) or orphaned (no undo exists, so the world kept it).
* ``UNDONE`` — its saga failed because of it (the rollback's cause is this step's own error),
  or its own call failed and it was compensated, or its call definitely did not apply.
* ``COLLATERAL`` — its call committed and it was compensated because something *later* failed.
  These calls worked; ``preference_pairs`` never uses them and ``negatives`` leaves them out
  unless asked (labelling them negative teaches a model to avoid calls that worked).
* ``UNKNOWN`` — the outcome was never resolved: the saga has no end record (a crash), the
  rollback reached no verdict on the step (unresolved, or its undo kept failing), or the call's
  own outcome is unknown and nothing settled it.

Blame is the rollback's cause matched to a step's logged error: the newest step whose call
failed with exactly the error the ROLLBACK_STARTED record names is the one the saga failed
because of. A rollback whose cause names no step's error (the agent's own code raised) blames
no step: every compensated step of it is COLLATERAL.

What an example carries is what the log holds: the arguments as logged (already redacted by
the engine), a *shape* of the result (the call's state, the error's type, the undo the result
produced with its argument names and JSON types, and ``returned``: the shape of what the
forward returned, from the value or the shape its commit record holds (``agent_saga.log.results``:
type name, length, a dict's keys with their value types; never a value), or None when the
record holds neither (an older log, ``record_result="none"``, a call that did not commit)), the saga's steps before this one as the agent saw
them at call time (tool, arguments, call state; never their later fate, which would leak the
label), and the seqs of the records it came from.

``build_corpus`` trusts the records it is given: check the chain first (``agent-saga verify``;
the ``corpus`` verb refuses a log whose chain does not verify).
"""

from __future__ import annotations

import enum
import importlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.log.records import RecordType as R
from agent_saga.log.results import SHAPE_KEY, shape_of
from agent_saga.log.source import log_records
from agent_saga.recovery.fold import SagaView, StepView, fold

__all__ = ["Corpus", "Example", "Label", "PreferencePair", "build_corpus"]

_INSTALL = "pip install 'agent-saga[corpus]>=3.0.0'"


class Label(enum.StrEnum):
    """What the world did with a step's effect."""

    KEPT = "KEPT"
    UNDONE = "UNDONE"
    COLLATERAL = "COLLATERAL"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Example:
    """One executed step and its label (``reason`` says in words why it got that label)."""

    saga_id: str
    saga_name: str
    step: int
    tool: str
    semantics: str
    args: dict[str, Any]
    result: dict[str, Any]
    context: tuple[dict[str, Any], ...]
    label: Label
    reason: str
    saga_outcome: str  # completed | rolled back | open
    seqs: tuple[int, ...]
    args_logged: bool = True  # False: the log holds no arguments for it (a failed REVERSIBLE one, in an older log)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the form ``to_jsonl`` writes and ``from_dict`` reads)."""
        return {
            "saga_id": self.saga_id, "saga_name": self.saga_name, "step": self.step, "tool": self.tool,
            "semantics": self.semantics, "args": self.args, "result": self.result, "context": list(self.context),
            "label": self.label.value, "reason": self.reason, "saga_outcome": self.saga_outcome,
            "seqs": list(self.seqs), "args_logged": self.args_logged,
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Example:
        try:
            return cls(
                str(row["saga_id"]), str(row["saga_name"]), int(row["step"]), str(row["tool"]),
                str(row["semantics"]), dict(row["args"]), dict(row["result"]),
                tuple(dict(c) for c in row["context"]), Label(row["label"]), str(row["reason"]),
                str(row["saga_outcome"]), tuple(int(s) for s in row["seqs"]), bool(row.get("args_logged", True)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a corpus example ({type(err).__name__}: {err}); write it with Corpus.to_jsonl") from None

    @property
    def path(self) -> tuple[tuple[str, str], ...]:
        """The saga's steps before this one as (tool, call state): what ``comparable`` matches on."""
        return tuple((str(c["tool"]), str(c["call"])) for c in self.context)


@dataclass(frozen=True)
class PreferencePair:
    """A DPO pair: the same prompt, the call the world kept (chosen) and one it undid (rejected)."""

    tool: str
    prompt: str
    chosen: str
    rejected: str
    chosen_seqs: tuple[int, ...]
    rejected_seqs: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected, "tool": self.tool,
                "chosen_seqs": list(self.chosen_seqs), "rejected_seqs": list(self.rejected_seqs)}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def comparable(a: Example, b: Example) -> bool:
    """Whether two examples may be paired: the same tool, in a saga of the same name, after the
    same path (the same earlier steps' tools and call states, in order). Arguments of the earlier
    steps may differ: the path is what the agent had done, not with which values."""
    return a.tool == b.tool and a.saga_name == b.saga_name and a.path == b.path


@dataclass(frozen=True)
class Corpus:
    """The labelled examples of a log, in log order (saga, then step)."""

    examples: tuple[Example, ...]
    skipped: int = 0  # executed steps the log names no tool for (a failed REVERSIBLE call, in an older log)

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    def counts(self) -> dict[str, int]:
        """How many examples carry each label (every label, zeros included)."""
        return {label.value: sum(1 for e in self.examples if e.label is label) for label in Label}

    def positives(self) -> list[Example]:
        return [e for e in self.examples if e.label is Label.KEPT]

    def negatives(self, *, include_collateral: bool = False) -> list[Example]:
        """UNDONE examples; COLLATERAL ones only when asked (they are calls that worked)."""
        wanted = {Label.UNDONE, Label.COLLATERAL} if include_collateral else {Label.UNDONE}
        return [e for e in self.examples if e.label in wanted]

    def preference_pairs(self) -> list[PreferencePair]:
        """DPO pairs (prompt, chosen, rejected) within one tool and comparable contexts.

        Chosen is a KEPT call, rejected an UNDONE one, and the two are ``comparable``: the same
        tool, a saga of the same name, and the same path before the call (the earlier steps'
        tools and call states, in order). The prompt is that shared context as canonical JSON
        (saga name, tool, path); chosen and rejected are each call's logged arguments as
        canonical JSON. Every KEPT x UNDONE combination of a group is emitted, in log order,
        except where the two calls' arguments are identical (no preference is expressed by a
        call and itself). COLLATERAL and UNKNOWN examples are never used, nor an example whose
        arguments the log does not hold (``args_logged`` False: a failed REVERSIBLE call in an older log).
        """
        groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Example]] = {}
        for e in self.examples:
            if e.label in (Label.KEPT, Label.UNDONE) and e.args_logged:
                groups.setdefault((e.tool, e.saga_name, e.path), []).append(e)
        pairs = []
        for (tool, name, path), members in groups.items():
            prompt = _canonical({"saga": name, "tool": tool, "before": [list(p) for p in path]})
            kept = [e for e in members if e.label is Label.KEPT]
            undone = [e for e in members if e.label is Label.UNDONE]
            for good, bad in itertools.product(kept, undone):
                chosen, rejected = _canonical(good.args), _canonical(bad.args)
                if chosen != rejected:
                    pairs.append(PreferencePair(tool, prompt, chosen, rejected, good.seqs, bad.seqs))
        return pairs

    def rows(self, *, pairs: bool = False) -> list[dict[str, Any]]:
        """The examples (or the preference pairs) as JSON-ready dicts."""
        return [p.to_dict() for p in self.preference_pairs()] if pairs else [e.to_dict() for e in self.examples]

    def to_jsonl(self, path: str | Path, *, pairs: bool = False) -> int:
        """Write one JSON object a line (the examples, or the pairs); returns how many lines."""
        rows = self.rows(pairs=pairs)
        with Path(path).open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str) + "\n")
        return len(rows)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Corpus:
        """Read back what ``to_jsonl`` wrote (examples, not pairs)."""
        examples = []
        with Path(path).open(encoding="utf-8") as src:
            for number, line in enumerate(src, 1):
                if line.strip():
                    try:
                        examples.append(Example.from_dict(json.loads(line)))
                    except ValueError as err:
                        raise ValueError(f"{path}:{number}: {err}") from None
        return cls(tuple(examples))

    def _table_rows(self, pairs: bool) -> list[dict[str, Any]]:
        # Arguments, results and contexts differ in keys from call to call: a columnar schema
        # inferred from them would break on the next log, so they travel as JSON text columns.
        if pairs:
            return self.rows(pairs=True)
        return [{**row, "args": _canonical(row["args"]), "result": _canonical(row["result"]),
                 "context": _canonical(row["context"])} for row in self.rows()]

    def to_parquet(self, path: str | Path, *, pairs: bool = False) -> int:
        """Write a Parquet file (args, result and context as JSON text); needs the ``corpus`` extra."""
        pa, pq = _pyarrow()
        rows = self._table_rows(pairs)
        pq.write_table(pa.Table.from_pylist(rows, schema=_schema(pa, pairs)), str(path))
        return len(rows)

    def to_dataset(self, *, pairs: bool = False) -> Any:
        """A Hugging Face ``datasets.Dataset`` of the same rows as ``to_parquet``; needs the ``corpus`` extra."""
        pa, _ = _pyarrow()
        try:
            datasets = importlib.import_module("datasets")
        except ImportError:
            raise ImportError(f"Corpus.to_dataset needs the 'datasets' package: {_INSTALL}") from None
        return datasets.Dataset(pa.Table.from_pylist(self._table_rows(pairs), schema=_schema(pa, pairs)))


def _pyarrow() -> tuple[Any, Any]:
    # Imported by name (an optional dependency, typed here as Any), and only when an export runs:
    # `import agent_saga` loads no third-party module.
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ImportError(f"Parquet and dataset export need pyarrow: {_INSTALL}") from None


def _schema(pa: Any, pairs: bool) -> Any:
    # Explicit, so an empty corpus still writes a table with every column.
    seqs = pa.list_(pa.int64())
    if pairs:
        return pa.schema([("prompt", pa.string()), ("chosen", pa.string()), ("rejected", pa.string()),
                          ("tool", pa.string()), ("chosen_seqs", seqs), ("rejected_seqs", seqs)])
    text = pa.string()
    return pa.schema([("saga_id", text), ("saga_name", text), ("step", pa.int64()), ("tool", text),
                      ("semantics", text), ("args", text), ("result", text), ("context", text), ("label", text),
                      ("reason", text), ("saga_outcome", text), ("seqs", seqs),
                      ("args_logged", pa.bool_())])


@dataclass
class _Trail:
    """What the fold does not keep, read from the same records: seqs, errors, the rollback's cause."""

    seqs: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    errors: dict[tuple[str, int], str] = field(default_factory=dict)
    saga_seqs: dict[str, list[int]] = field(default_factory=dict)  # rollback start and end records
    causes: dict[str, str] = field(default_factory=dict)

    def feed(self, record: Mapping[str, Any]) -> None:
        saga, step, seq = record.get("saga"), record.get("step"), record.get("seq")
        if not isinstance(saga, str):
            return
        rtype = str(record.get("type"))
        body = record.get("body")
        body = body if isinstance(body, dict) else {}
        if isinstance(step, int):
            if isinstance(seq, int):
                self.seqs.setdefault((saga, step), []).append(seq)
            if rtype in (R.STEP_UNKNOWN, R.STEP_NOT_APPLIED) and isinstance(body.get("error"), str):
                self.errors[(saga, step)] = body["error"]
            elif rtype == R.STEP_COMMITTED and body.get("problem"):
                self.errors[(saga, step)] = str(body["problem"])  # the undo could not be built: the step raised
        elif rtype in (R.ROLLBACK_STARTED, R.SAGA_COMPLETED, R.SAGA_ROLLED_BACK):
            if isinstance(seq, int):
                self.saga_seqs.setdefault(saga, []).append(seq)
            if rtype == R.ROLLBACK_STARTED and "cause" in body:
                self.causes.setdefault(saga, str(body["cause"]))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _result_shape(step: StepView, error: str | None) -> dict[str, Any]:
    comp = step.compensation
    undo = None
    if comp:
        kwargs = comp.get("kwargs")
        undo = {"handler": str(comp.get("handler") or ""),
                "args": {str(k): _json_type(v) for k, v in kwargs.items()} if isinstance(kwargs, dict) else {}}
    returned = None
    if step.has_result:
        recorded = step.result
        shape = recorded.get(SHAPE_KEY) if isinstance(recorded, dict) else None
        returned = dict(shape) if isinstance(shape, dict) else shape_of(recorded)
    return {"call": step.state, "error": error.split(":", 1)[0] if error else None, "undo": undo,
            "returned": returned}


def _executed(step: StepView) -> bool:
    return step.intent or step.committed or step.unknown or step.not_applied


def _blamed(view: SagaView, trail: _Trail) -> int | None:
    """The step the saga failed because of: the newest whose own error is the rollback's cause."""
    cause = trail.causes.get(view.saga_id)
    if cause is None:
        return None
    for index in sorted(view.steps, reverse=True):
        if trail.errors.get((view.saga_id, index)) == cause:
            return index
    return None


def _label(step: StepView, outcome: str, unwinding: bool, blamed: bool, failed: bool) -> tuple[Label, str]:
    if blamed:
        return Label.UNDONE, "its saga rolled back because of this call's own failure"
    if failed and step.settled == "compensated":
        return Label.UNDONE, "its own call failed and it was compensated"
    if step.not_applied:
        return Label.UNDONE, "its own call failed and did not apply"
    if outcome == "open":
        return Label.UNKNOWN, "its saga has no end record (crashed or still running): the outcome never resolved"
    if step.state != "committed" or failed:
        return Label.UNKNOWN, f"its call's outcome is {step.state} and nothing settled it"
    if not unwinding:
        return Label.KEPT, "committed, and its saga completed"
    if step.settled == "compensated":
        return Label.COLLATERAL, "committed and worked, compensated because a later failure rolled its saga back"
    if step.settled in ("kept", "orphaned"):
        why = "nothing to undo" if step.settled == "kept" else "no undo exists"
        return Label.KEPT, f"committed; its saga rolled back but the world kept it ({why})"
    if step.compensation_failed:
        return Label.UNKNOWN, "its saga rolled back and its undo failed: whether the effect stands is unresolved"
    return Label.UNKNOWN, "its saga rolled back and the rollback reached no verdict on it"


def _context(view: SagaView, before: int) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"step": i, "tool": s.tool or "", "args": dict(s.args or {}), "call": s.state}
        for i, s in sorted(view.steps.items()) if i < before and (_executed(s) or s.refused)
    )


def _saga_examples(view: SagaView, trail: _Trail) -> tuple[list[Example], int]:
    unwinding = view.rollback_started or view.ended == R.SAGA_ROLLED_BACK
    outcome = ("completed" if view.ended == R.SAGA_COMPLETED
               else "rolled back" if view.ended == R.SAGA_ROLLED_BACK else "open")
    blamed = _blamed(view, trail)
    examples, skipped = [], 0
    for index, step in sorted(view.steps.items()):
        if not _executed(step):
            continue
        if step.tool is None:
            skipped += 1
            continue
        key = (view.saga_id, index)
        error = trail.errors.get(key)
        label, reason = _label(step, outcome, unwinding, index == blamed, error is not None)
        seqs = trail.seqs.get(key, []) + (trail.saga_seqs.get(view.saga_id, []) if unwinding or outcome != "open" else [])
        examples.append(Example(
            view.saga_id, view.name, index, step.tool, step.semantics or "", dict(step.args or {}),
            _result_shape(step, error), _context(view, index), label, reason, outcome, tuple(sorted(set(seqs))),
            step.args is not None,
        ))
    return examples, skipped


def build_corpus(records: Iterable[Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> Corpus:
    """One labelled ``Example`` per executed step of the log ``records`` (oldest first).

    ``records`` are what ``agent_saga.log.read_records(path)`` or a WAL's ``records()`` yields,
    or ``json.loads`` of each line of a log file: both are accepted.
    """
    records = log_records(records, caller="build_corpus")
    trail = _Trail()
    for record in records:
        trail.feed(record)
    examples: list[Example] = []
    skipped = 0
    for view in fold(records).values():
        if view.started:
            more, missed = _saga_examples(view, trail)
            examples += more
            skipped += missed
    return Corpus(tuple(examples), skipped)
