"""The debugger's view of a log: runs, their steps, and a replay of each, as JSON-ready dicts.

Everything here is drawn from ``ui._model`` (the recovery fold), like ``graph`` and
``animate``, so the debugger, the pictures and the recovery daemon cannot disagree.
A replay is that same reconstruction taken after each record of the run in turn
(``ui._frames``: one fold, fed a record at a time), so the last frame is exactly the
run's verdict. A frame lists only the steps its record changed, and a replay is served
in pages of at most ``PAGE_FRAMES`` frames (fewer when they hold more than ``PAGE_STEPS``
steps), so no request does more than a page's work and none answers with the square of
the run's length; a run too large to replay within ``ui._frames.DEFAULT_BUDGET`` says
where its replay stops.

Nothing secret leaves this module: arguments and compensation kwargs pass through
``redaction.redact_args`` before they are served (a value the log holds in clear
under a secret-looking name is withheld too), and a name ending in ``ref`` is
marked as a credential *reference*, resolved at use time and never a value.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from agent_saga.audit import verify_records
from agent_saga.inert import inert
from agent_saga.log.records import AUDIT_SAGA, Record
from agent_saga.log.records import RecordType as R
from agent_saga.redaction import REDACTED, redact_args
from agent_saga.ui._follow import RecordSource
from agent_saga.ui._frames import Frame, Replay
from agent_saga.ui._model import LABELS, GraphSaga, GraphStep, Status, reconstruct
from agent_saga.ui._verdicts import verdict_line

__all__ = ["PAGE_FRAMES", "PAGE_STEPS", "RunStore"]

#: Frames served per replay request at most, and the step entries after which a page ends early.
PAGE_FRAMES = 2000
PAGE_STEPS = 20000
#: Replays kept half-read between page requests (a page continues where the last one stopped).
_CURSORS = 8

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


def _provenance(claims: Mapping[str, Any]) -> list[dict[str, str]]:
    """Each tagged argument's claim as one line: its level and where it points (issue 26)."""
    return [{"name": str(name), "claim": _claim(claim)} for name, claim in claims.items()]


def _claim(claim: Any) -> str:
    if not isinstance(claim, Mapping):
        return str(claim)
    level = str(claim.get("level", "?"))
    receipt = claim.get("receipt")
    if isinstance(receipt, Mapping):
        return (f"{level} {receipt.get('doc_id')}[{receipt.get('start')}:{receipt.get('end')}] "
                f"sha256 {str(receipt.get('sha256', ''))[:12]}")
    if "request" in claim:
        return f"{level} request {claim['request']}"
    if "how" in claim:
        inputs = claim.get("from")
        parts = ", ".join(_claim(x) for x in inputs) if isinstance(inputs, list) else ""
        return f"{level} {claim['how']} of ({parts})"
    return level


def _summary(saga: GraphSaga) -> dict[str, Any]:
    return {
        "id": saga.saga_id, "name": saga.name, "status": saga.status, "verdict": saga.verdict,
        "verdict_kind": saga.verdict_kind, "cause": saga.cause, "started_us": saga.started_us,
        "ended_us": saga.ended_us, "recovered": saga.recovered, "steps": len(saga.steps),
        "tools": sorted({s.tool for s in saga.steps}), "tally": saga.tally(),
    }


def _step_state(step: GraphStep, status: Status) -> dict[str, Any]:
    final = step.final(status)
    return {
        "index": step.index, "tool": step.tool, "semantics": step.semantics, "state": step.state,
        "outcome": step.outcome, "final": final,
        "label": LABELS[step.outcome] if step.outcome else final, "note": step.note,
        **({"served": True} if step.served else {}),  # a resumed run took it from the log
    }


def _frame(frame: Frame) -> dict[str, Any]:
    """One replay frame: the saga's state after a record, with only the steps that record changed."""
    record = frame.record
    return {
        "seq": record.get("seq"), "type": record.get("type"), "step": record.get("step"),
        "status": frame.status, "verdict": frame.verdict, "verdict_kind": frame.verdict_kind,
        "changed": [_step_state(step, frame.status) for step, _ in frame.changed], "tally": frame.tally,
    }


class _Cursor:
    """A replay read part-way: where the fold stands, so that the next page continues from there.

    Only the fold is kept between pages, never the frames served: a page the viewer asks
    for again (it went back) is read again from the run's start, which costs what the
    pages before it cost once.
    """

    def __init__(self, saga_id: str, records: list[Record]) -> None:
        self.saga_id = saga_id
        self.records = records
        self._restart()

    def _restart(self) -> None:
        self.replay = Replay(self.saga_id, self.records)
        self._rest: Iterator[Frame] = iter(self.replay)
        self._held: Frame | None = None  # pulled for a page it did not fit in
        self.position = 0  # the number of the next frame
        self.done = False

    def _next(self) -> Frame | None:
        frame, self._held = self._held, None
        if frame is None and not self.done:
            frame = next(self._rest, None)
            self.done = frame is None
        return frame

    def page(self, start: int) -> list[dict[str, Any]]:
        """Frames from ``start`` on: at most PAGE_FRAMES, and no more than PAGE_STEPS steps unless one frame has more."""
        if start < self.position:
            self._restart()
        while self.position < start and self._next() is not None:
            self.position += 1
        frames: list[dict[str, Any]] = []
        steps = 0
        while len(frames) < PAGE_FRAMES and (frame := self._next()) is not None:
            if frames and steps + len(frame.changed) > PAGE_STEPS:
                self._held = frame
                break
            frames.append(_frame(frame))
            steps += len(frame.changed)
            self.position += 1
        return frames

    @property
    def more(self) -> bool:
        if self._held is None and not self.done:
            self._held = next(self._rest, None)
            self.done = self._held is None
        return self._held is not None


def _body(record: Record) -> dict[str, Any]:
    body = record.get("body")
    return body if isinstance(body, dict) else {}


def _brief(record: Record) -> str:
    """One line about a record for the raw timeline."""
    body = _body(record)
    if "body" not in record:
        return "body encrypted (no key) or redacted"
    verdict = verdict_line(record)
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
        self._cursors: OrderedDict[tuple[str, int], _Cursor] = OrderedDict()
        self._cursor_lock = threading.Lock()

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
        own: dict[int, list[Record]] = {}
        for r in records:  # one pass: looking each step's records up in all of them is quadratic
            index = r.get("step")
            if isinstance(index, int):
                own.setdefault(index, []).append(r)
        steps = []
        for step in saga.steps:
            entry = _step_state(step, saga.status)
            entry.update(_step_detail(own.get(step.index, [])))
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

    def replay(self, saga_id: str, start: int = 0) -> dict[str, Any] | None:
        """One page of the run as it stood after each of its records, from frame ``start`` on.

        ``frames`` holds at most ``PAGE_FRAMES`` frames, each listing only the steps its
        record changed (a viewer applies them in order); ``next`` is the ``start`` of the
        following page, or None after the last; ``total`` is how many frames the run has;
        ``truncated`` says why the frames stop early, if they do. None: no such run.
        """
        with self._lock:
            saga_id = self._shown.get(saga_id, "")
            if saga_id not in self._sagas:
                return None
            version = self.version
            records = self._by_saga.get(saga_id, [])
            cursor = self._cursors.get((saga_id, version))
            if cursor is None:
                cursor = _Cursor(saga_id, list(records))
        with self._cursor_lock:
            self._cursors[(saga_id, version)] = cursor
            self._cursors.move_to_end((saga_id, version))
            while len(self._cursors) > _CURSORS:
                self._cursors.popitem(last=False)
            start = max(0, start)
            page = cursor.page(start)
            more = cursor.more
            return {
                "start": start, "frames": page, "next": start + len(page) if more and page else None,
                "total": cursor.replay.total, "truncated": None if more else cursor.replay.truncated,
            }


def _step_detail(records: list[Record]) -> dict[str, Any]:
    """Arguments, errors, the compensation the log names and what running it did."""
    detail: dict[str, Any] = {"args": [], "op": None, "error": None, "refusal": None, "compensation": None,
                              "undo_records": [], "provenance": [], "origin": None}
    for r in records:
        body, rtype = _body(r), r.get("type")
        if "args" in body:
            detail["args"] = _arguments(body["args"])
        if isinstance(body.get("op"), str):
            detail["op"] = body["op"]
        if isinstance(body.get("origin"), str):  # the framework (adapter) or front door that made the call
            detail["origin"] = body["origin"]
        if rtype in (R.STEP_UNKNOWN, R.STEP_NOT_APPLIED) and body.get("error"):
            detail["error"] = str(body["error"])
        if rtype == R.STEP_REFUSED:
            detail["refusal"] = {"rule": body.get("rule"), "reason": body.get("reason")}
        if isinstance(body.get("provenance"), dict):
            detail["provenance"] = _provenance(body["provenance"])
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
