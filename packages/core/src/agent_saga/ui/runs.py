"""The debugger's view of a log: runs, their steps, and a replay of each, as JSON-ready dicts.

Everything here is drawn from ``viz.model`` (the recovery fold), like ``graph`` and
``animate``, so the debugger, the pictures and the recovery daemon cannot disagree.
A replay is that same reconstruction taken after each record of the run in turn,
so the last frame is exactly the run's verdict.

Nothing secret leaves this module: arguments and compensation kwargs pass through
``redaction.redact_args`` before they are served (a value the log holds in clear
under a secret-looking name is withheld too), and a name ending in ``ref`` is
marked as a credential *reference*, resolved at use time and never a value.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from agent_saga.audit.verify import verify_records
from agent_saga.inert import inert
from agent_saga.log.records import AUDIT_SAGA, Record
from agent_saga.log.records import RecordType as R
from agent_saga.redaction import REDACTED, redact_args
from agent_saga.ui.source import RecordSource
from agent_saga.viz.model import LABELS, GraphSaga, GraphStep, reconstruct
from agent_saga.viz.verdicts import verdict_of

__all__ = ["RunStore"]

# A last word "ref"/"reference" (credential_ref, apiKeyRef, vault-reference), as in redaction.
_REFERENCE = re.compile(r"(?:^|[_\-.])(?i:ref|reference)$|(?<=[a-z0-9])(?:Ref|Reference)$")
_COMPENSATION_RECORDS = (R.COMPENSATION_STARTED, R.COMPENSATION_FAILED, R.STEP_COMPENSATED, R.STEP_ORPHANED,
                         R.STEP_UNRESOLVED, R.STEP_KEPT, R.ESCALATED)


def _arguments(values: Any) -> list[dict[str, Any]]:
    """Each argument as name, value and kind (value | redacted | reference)."""
    if not isinstance(values, Mapping):
        return []
    out = []
    for name, value in redact_args(values).items():
        kind = "redacted" if value == REDACTED else "reference" if _REFERENCE.search(str(name)) else "value"
        out.append({"name": str(name), "value": value, "kind": kind})
    return out


def _summary(saga: GraphSaga) -> dict[str, Any]:
    return {
        "id": saga.saga_id, "name": saga.name, "status": saga.status, "verdict": saga.verdict,
        "verdict_kind": saga.verdict_kind, "cause": saga.cause, "started_us": saga.started_us,
        "ended_us": saga.ended_us, "recovered": saga.recovered, "steps": len(saga.steps),
        "tools": sorted({s.tool for s in saga.steps}), "tally": saga.tally(),
    }


def _step_state(step: GraphStep, saga: GraphSaga) -> dict[str, Any]:
    final = step.final(saga.status)
    return {
        "index": step.index, "tool": step.tool, "semantics": step.semantics, "state": step.state,
        "outcome": step.outcome, "final": final,
        "label": LABELS[step.outcome] if step.outcome else final,
    }


def _frame(saga: GraphSaga, record: Record) -> dict[str, Any]:
    return {
        "seq": record.get("seq"), "type": record.get("type"), "step": record.get("step"),
        "status": saga.status, "verdict": saga.verdict, "verdict_kind": saga.verdict_kind,
        "steps": [_step_state(s, saga) for s in saga.steps], "unwound": [s.index for s in saga.unwound],
        "tally": saga.tally(),
    }


def _body(record: Record) -> dict[str, Any]:
    body = record.get("body")
    return body if isinstance(body, dict) else {}


def _brief(record: Record) -> str:
    """One line about a record for the raw timeline."""
    body = _body(record)
    if "body" not in record:
        return "body encrypted (no key) or redacted"
    verdict = verdict_of(record)
    if verdict is not None:
        return verdict.label
    for key in ("tool", "cause", "reason", "error", "handler", "by", "name"):
        if isinstance(body.get(key), str) and body[key]:
            return f"{key}: {body[key]}"
    return ""


class RunStore:
    """Every run of one log, refreshed from its source on demand (thread-safe)."""

    def __init__(self, source: RecordSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._by_saga: dict[str, list[Record]] = {}
        self._sagas: dict[str, GraphSaga] = {}
        self._order: list[str] = []
        self._shown: dict[str, str] = {}  # each run's id as served (inert) -> its id in the log
        self._chain: dict[str, Any] = {}
        self.version = 0

    def refresh(self) -> int:
        """Read what was appended; returns the version (it grows whenever the runs changed)."""
        with self._lock:
            poll = self.source.poll()
            if not poll.records and not poll.reset:
                return self.version
            if poll.reset:
                self._records, self._by_saga = [], {}
            self._records.extend(poll.records)
            for r in poll.records:
                saga = r.get("saga")
                if isinstance(saga, str) and saga != AUDIT_SAGA:
                    self._by_saga.setdefault(saga, []).append(r)
            sagas = reconstruct(self._records)
            self._sagas = {s.saga_id: s for s in sagas}
            self._order = [s.saga_id for s in sagas]
            self._shown = {inert(s.saga_id): s.saga_id for s in sagas}  # inert is injective: no two collide
            report = verify_records(self._records)
            self._chain = {"status": report.status, "label": report.label, "records": report.records}
            self.version += 1
            return self.version

    def runs(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": self.version, "location": self.source.location, "chain": self._chain,
                "runs": [_summary(self._sagas[i]) for i in reversed(self._order)],  # newest first
            }

    def run(self, saga_id: str) -> dict[str, Any] | None:
        """Everything about one run (``saga_id`` as served), or None if the log has no such run."""
        with self._lock:
            saga_id = self._shown.get(saga_id, "")
            saga = self._sagas.get(saga_id)
            if saga is None:
                return None
            records = list(self._by_saga.get(saga_id, []))
        steps = []
        for step in saga.steps:
            own = [r for r in records if r.get("step") == step.index]
            entry = _step_state(step, saga)
            entry.update(_step_detail(own))
            steps.append(entry)
        return {
            **_summary(saga),
            "steps": steps,
            "unwound": [s.index for s in saga.unwound],
            "verdicts": [{"seq": v.seq, "type": v.type, "label": v.label, "kind": v.kind, "after_step": v.after_step}
                         for v in saga.verdicts],
            "records": [
                {"seq": r.get("seq"), "ts": r.get("ts"), "type": r.get("type"), "step": r.get("step"),
                 "brief": _brief(r)} for r in records
            ],
        }

    def replay(self, saga_id: str) -> list[dict[str, Any]] | None:
        """The run as it stood after each of its records, from the first to the verdict."""
        with self._lock:
            saga_id = self._shown.get(saga_id, "")
            if saga_id not in self._sagas:
                return None
            records = list(self._by_saga.get(saga_id, []))
        frames = []
        for n in range(1, len(records) + 1):
            built = reconstruct(records[:n])
            if built:  # nothing to draw before the saga's start record
                frames.append(_frame(built[0], records[n - 1]))
        return frames


def _step_detail(records: list[Record]) -> dict[str, Any]:
    """Arguments, errors, the compensation the log names and what running it did."""
    detail: dict[str, Any] = {"args": [], "op": None, "error": None, "refusal": None, "compensation": None,
                              "undo_records": []}
    for r in records:
        body, rtype = _body(r), r.get("type")
        if "args" in body:
            detail["args"] = _arguments(body["args"])
        if isinstance(body.get("op"), str):
            detail["op"] = body["op"]
        if rtype in (R.STEP_UNKNOWN, R.STEP_NOT_APPLIED) and body.get("error"):
            detail["error"] = str(body["error"])
        if rtype == R.STEP_REFUSED:
            detail["refusal"] = {"rule": body.get("rule"), "reason": body.get("reason")}
        comp = body.get("compensation")
        if isinstance(comp, dict) and rtype in (R.STEP_INTENT, R.STEP_COMMITTED, R.STEP_UNKNOWN):
            # the latest descriptor wins: the one derived from the result replaces the one known before
            detail["compensation"] = {
                "handler": comp.get("handler"), "description": comp.get("description"), "key": comp.get("key"),
                "recoverable": comp.get("recoverable"), "kwargs": _arguments(comp.get("kwargs")),
            }
        if rtype in _COMPENSATION_RECORDS:
            entry: dict[str, Any] = {"seq": r.get("seq"), "ts": r.get("ts"), "type": rtype}
            entry.update((k, body[k]) for k in ("attempt", "attempts", "by", "key", "handler", "error", "kind")
                         if k in body and not isinstance(body[k], (dict, list)))
            detail["undo_records"].append(entry)
    return detail
