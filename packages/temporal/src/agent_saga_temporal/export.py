"""A job's Temporal history, written as the core's hash-chained log.

The history is the evidence: what was scheduled, what each activity answered, what
the workflow recorded in its memo (refusals, its status and why). Each is mapped to
the core's record types and appended through :class:`agent_saga.FileWAL`, so the
chain is the real one and ``agent-saga verify`` / ``agent-saga graph`` read a
Temporal job like any other saga.

The undo of an exported step belongs to the workflow, not to the core's recovery
daemon: its descriptor says ``recoverable: false`` (``engine: temporal``), so a daemon
that reads the exported log escalates instead of running it a second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

from agent_saga import FileWAL
from agent_saga.ids import operation_id
from agent_saga.log import RecordType, read_records
from agent_saga_temporal.model import (
    ACTIVITY,
    NOT_APPLIED,
    Answer,
    EffectCall,
    InvariantResult,
    JobReport,
    JobSpec,
    Proposal,
    Situation,
    UndoCall,
    Unresolvable,
    resolve_refs,
)

__all__ = ["ExportError", "Exported", "export_job", "history_records"]

R = RecordType
_INPUTS: dict[str, type] = {
    ACTIVITY.DECIDE: Situation, ACTIVITY.EFFECT: EffectCall, ACTIVITY.RECONCILE: EffectCall,
    ACTIVITY.UNDO: UndoCall, ACTIVITY.CHECK_UNDO: UndoCall,
}
_RESULTS: dict[str, Any] = {
    ACTIVITY.DECIDE: Proposal, ACTIVITY.RECONCILE: Answer, ACTIVITY.CHECK_UNDO: Answer,
    ACTIVITY.INVARIANTS: list[InvariantResult],
}
_SETTLE = {"kept": R.STEP_KEPT, "orphaned": R.STEP_ORPHANED, "unresolved": R.STEP_UNRESOLVED}


class ExportError(Exception):
    """The history cannot be exported (not found, already in the log, unreadable)."""


@dataclass(frozen=True)
class Exported:
    saga_id: str
    path: Path
    records: int
    status: str  # the job's status as the history shows it (open jobs: their latest)


@dataclass
class _Record:
    type: RecordType
    step: int | None
    body: dict[str, Any]


@dataclass
class _Mapper:
    """Walks the events once, keeping what later events refer back to."""

    converter: DataConverter
    job: JobSpec | None = None
    records: list[_Record] = field(default_factory=list)
    scheduled: dict[int, tuple[str, Any]] = field(default_factory=dict)  # event id -> (activity, input)
    proposals: dict[int, Proposal] = field(default_factory=dict)  # turn -> proposal
    undo_runs: dict[int, int] = field(default_factory=dict)  # step -> runs of its undo
    settled: set[tuple[int, str]] = field(default_factory=set)
    resolutions: int = 0
    rolling_back: bool = False
    status: str = "running"
    checks: list[InvariantResult] = field(default_factory=list)
    held_not_applied: dict[int, dict[str, Any]] = field(default_factory=dict)

    def emit(self, rtype: RecordType, step: int | None, body: dict[str, Any]) -> None:
        self.flush(superseded_by=step if rtype is R.STEP_INTENT else None)
        self.records.append(_Record(rtype, step, body))

    def flush(self, superseded_by: int | None = None) -> None:
        # "Did not land" is final unless the workflow runs the same step again next.
        for held, body in list(self.held_not_applied.items()):
            if held != superseded_by:
                self.records.append(_Record(R.STEP_NOT_APPLIED, held, body))
            del self.held_not_applied[held]

    async def decode(self, payloads: Sequence[Payload], hint: Any = None) -> Any:
        if not payloads:
            return None
        values = await self.converter.decode(list(payloads), [hint] if hint is not None else None)
        return values[0]

    def spec(self, name: str) -> Any:
        assert self.job is not None
        try:
            return self.job.step(name)
        except KeyError:
            return None

    def undo_descriptor(self, call: EffectCall, result: Any, known: bool) -> dict[str, Any] | None:
        spec = self.spec(call.name)
        if spec is None or spec.undo is None or self.job is None:
            return None
        sources: dict[str, Any] = {"facts": self.job.facts, "args": call.args}
        if known:
            sources["result"] = result
        try:
            kwargs = resolve_refs(spec.undo.args, sources)
        except Unresolvable:
            return None
        return {
            "handler": spec.undo.handler, "kwargs": kwargs,
            "key": operation_id(call.saga_id, call.step, call.tool, "compensate"),
            "description": f"{spec.undo.handler}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})",
            # The workflow runs this undo; a recovery daemon reading the export must not.
            "recoverable": False, "engine": "temporal",
        }

    async def feed(self, event: HistoryEvent) -> None:
        kind = event.event_type
        at = event.event_time.ToJsonString() if event.HasField("event_time") else ""
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            self.job = await self.decode(started.input.payloads, JobSpec)
            assert self.job is not None
            self.emit(R.SAGA_STARTED, None, {
                "name": self.job.name, "tags": sorted(self.job.tags), "goal": self.job.goal,
                "owner": f"temporal:{started.original_execution_run_id}", "durable_log": True,
                "engine": "temporal", "at": at,
            })
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            name = scheduled.activity_type.name
            value = await self.decode(scheduled.input.payloads, _INPUTS.get(name))
            self.scheduled[event.event_id] = (name, value)
            await self._scheduled(name, value, at)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            name, value = self.scheduled[completed.scheduled_event_id]
            result = await self.decode(completed.result.payloads, _RESULTS.get(name))
            self._completed(name, value, result, at)
        elif kind in (EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT):
            failed = kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            ended = event.activity_task_failed_event_attributes if failed else event.activity_task_timed_out_event_attributes
            name, value = self.scheduled[ended.scheduled_event_id]
            failure = ended.failure
            kind_name = failure.application_failure_info.type if failure.HasField("application_failure_info") else ""
            message = failure.message if failed else f"timed out ({failure.message or 'no reply from the worker'})"
            self._failed(name, value, kind_name, message, at)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            memo = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            for key in memo:
                self._memo(key, await self.decode([memo[key]]), at)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            final: JobReport = await self.decode(
                event.workflow_execution_completed_event_attributes.result.payloads, JobReport
            )
            self._end(final, at)
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        ):
            self.emit(R.ESCALATED, None, {
                "kind": "workflow-ended-without-verdict", "event": EventType.Name(kind), "at": at,
                "detail": "the workflow stopped before reaching a status: what it did is above, nothing was checked",
            })

    async def _scheduled(self, name: str, value: Any, at: str) -> None:
        if name == ACTIVITY.EFFECT:
            call: EffectCall = value
            proposal = self.proposals.get(call.step)
            self.emit(R.STEP_INTENT, call.step, {
                "tool": call.tool, "semantics": call.semantics, "op": call.key, "args": call.args,
                "compensation": self.undo_descriptor(call, None, known=False), "fallback": False,
                "proposal": {"choice": proposal.choice, "confidence": proposal.confidence, "reason": proposal.reason}
                if proposal else None,
                "at": at,
            })
        elif name == ACTIVITY.UNDO:
            undo: UndoCall = value
            if not self.rolling_back:
                self.emit(R.ROLLBACK_STARTED, None, {"cause": "", "at": at})
                self.rolling_back = True
            self.undo_runs[undo.step] = self.undo_runs.get(undo.step, 0) + 1
            self.emit(R.COMPENSATION_STARTED, undo.step, {"key": undo.key, "handler": undo.handler, "at": at})

    def _completed(self, name: str, value: Any, result: Any, at: str) -> None:
        if name == ACTIVITY.DECIDE:
            situation: Situation = value
            self.proposals[situation.turn] = result
        elif name == ACTIVITY.EFFECT:
            call: EffectCall = value
            self.emit(R.STEP_COMMITTED, call.step, {
                "op": call.key, "compensation": self.undo_descriptor(call, result, known=True), "at": at,
            })
        elif name == ACTIVITY.RECONCILE:
            call = value
            answer: Answer = result
            if answer.exists is True:
                self.emit(R.STEP_COMMITTED, call.step, {
                    "op": call.key, "compensation": self.undo_descriptor(call, answer.result, known=True),
                    "reconciled": answer.detail or "landed", "at": at,
                })
            elif answer.exists is False:
                self.held_not_applied[call.step] = {
                    "op": call.key, "error": f"the reconciler says it did not land: {answer.detail}", "at": at,
                }
        elif name == ACTIVITY.CHECK_UNDO:
            undo: UndoCall = value
            answer = result
            attempts = self.undo_runs.get(undo.step, 1)
            if answer.reversed_ is True:
                self.emit(R.STEP_COMPENSATED, undo.step, {
                    "key": undo.key, "attempts": attempts, "checked": answer.detail or "in effect", "at": at,
                })
                self.settled.add((undo.step, "compensated"))
            else:
                state = "is not in effect" if answer.reversed_ is False else "could not be checked"
                self.emit(R.COMPENSATION_FAILED, undo.step, {
                    "key": undo.key, "attempts": attempts, "error": f"the undo {state}: {answer.detail}", "at": at,
                })
        elif name == ACTIVITY.INVARIANTS:
            self.checks = list(result)

    def _failed(self, name: str, value: Any, kind: str, message: str, at: str) -> None:
        if name == ACTIVITY.EFFECT:
            call: EffectCall = value
            if kind == NOT_APPLIED:
                self.emit(R.STEP_NOT_APPLIED, call.step, {"op": call.key, "error": message, "at": at})
            else:
                self.emit(R.STEP_UNKNOWN, call.step, {
                    "tool": call.tool, "semantics": call.semantics, "op": call.key, "error": message,
                    "compensation": self.undo_descriptor(call, None, known=False), "at": at,
                })
        elif name == ACTIVITY.UNDO:
            undo: UndoCall = value
            self.emit(R.COMPENSATION_FAILED, undo.step, {
                "key": undo.key, "attempts": self.undo_runs.get(undo.step, 1), "error": message, "at": at,
            })

    def _memo(self, key: str, value: Any, at: str) -> None:
        if key.startswith("refusal."):
            turn = int(key.split(".", 1)[1])
            spec = self.spec(str(value.get("choice")))
            self.emit(R.STEP_REFUSED, turn, {
                "tool": value.get("choice"), "semantics": spec.semantics if spec else None,
                "args": value.get("args"), "reason": value.get("reason"), "rule": value.get("rule"),
                "confidence": value.get("confidence"), "at": at,
            })
        elif key == "status":
            self.status = str(value)
        elif key == "cause" and value and self.status == "compensating" and not self.rolling_back:
            self.emit(R.ROLLBACK_STARTED, None, {"cause": value, "at": at})
            self.rolling_back = True
        elif key == "outcomes":
            for step_text, (outcome, detail) in sorted(value.items(), key=lambda kv: -int(kv[0])):
                step = int(step_text)
                if (step, outcome) in self.settled:
                    continue
                if outcome in _SETTLE:
                    self.emit(_SETTLE[outcome], step, {"detail": detail, "at": at})
                    self.settled.add((step, outcome))
                elif outcome == "unproven":
                    self.emit(R.ESCALATED, step, {"kind": "undo-unproven", "detail": detail, "at": at})
                    self.settled.add((step, outcome))
        elif key == "waiting" and value:
            self.emit(R.ESCALATED, None, {"kind": "waiting-for-person", "detail": value, "at": at})
        elif key == "resolutions":
            for resolution in value[self.resolutions:]:
                self.emit(R.ESCALATION_RESOLVED, None, {**resolution, "at": at})
            self.resolutions = len(value)

    def _end(self, final: JobReport, at: str) -> None:
        self.status = final.status
        checks = [{"name": c.name, "holds": c.holds, "detail": c.detail} for c in final.checks]
        if final.status == "succeeded_verified":
            self.emit(R.SAGA_COMPLETED, None, {
                "steps": len(final.steps), "unknown": [], "status": final.status, "checks": checks, "at": at,
            })
            return
        if not self.rolling_back and final.cause:
            self.emit(R.ROLLBACK_STARTED, None, {"cause": final.cause, "at": at})
        outcomes: dict[str, int] = {}
        for step in final.steps:
            if step.outcome:
                outcomes[step.outcome] = outcomes.get(step.outcome, 0) + 1
        self.emit(R.SAGA_ROLLED_BACK, None, {
            "clean": final.status in ("compensated_verified", "aborted_clean"), "halted": False,
            "status": final.status, "cause": final.cause, "outcomes": outcomes, "checks": checks,
            "resolved_by": [r.by for r in final.resolutions], "at": at,
        })


async def history_records(
    events: Iterable[HistoryEvent], converter: DataConverter
) -> tuple[list[tuple[str, int | None, dict[str, Any]]], str]:
    """The log records a history maps to, as (type, step, body), and the job's status."""
    mapper = _Mapper(converter)
    for event in events:
        await mapper.feed(event)
    mapper.flush()
    return [(r.type.value, r.step, r.body) for r in mapper.records], mapper.status


async def export_job(
    client: Client, workflow_id: str, wal_path: str | Path, *, run_id: str | None = None,
    history: WorkflowHistory | None = None,
) -> Exported:
    """Append the job's history to the log at ``wal_path`` (created if missing), chained.

    Refuses a job that is already in that log: a saga exported twice would read as
    two sets of effects.
    """
    path = Path(wal_path)
    if history is None:
        try:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        except Exception as err:
            raise ExportError(f"cannot read the history of workflow {workflow_id!r}: {err}") from err
    records, status = await history_records(history.events, client.data_converter)
    if path.exists() and any(r.get("saga") == workflow_id for r in read_records(path)):
        raise ExportError(f"{path} already holds saga {workflow_id!r}: export each job once, or to another log")
    wal = FileWAL(path)
    try:
        for rtype, step, body in records:
            wal.append(rtype, workflow_id, body, step)
        wal.barrier()
    finally:
        wal.close()
    return Exported(workflow_id, path, len(records), status)
