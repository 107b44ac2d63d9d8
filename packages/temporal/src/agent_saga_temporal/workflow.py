"""The saga job as a Temporal workflow: the agent proposes, this code disposes.

Deterministic and sandbox-safe: it reads no clock, does no I/O and draws no random
number; everything that touches the world or a model is an activity called by name
(``model.ACTIVITY``), so a replay reads the recorded answers. The rules are the
embedded engine's: a proposal runs only if it is an exact copy of an allowed step and
the gate agrees; a failed effect is settled by its reconciler before anything else;
finished steps are undone newest-first unless a fresh check proves the job done; an
undo counts only once a check sees it in effect; what cannot be proven waits for a
person, who resolves it with the ``resolve`` signal or update.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_saga.ids import operation_id
    from agent_saga_temporal.model import (
        ACTIVITY,
        NOT_APPLIED,
        AdmitCall,
        Answer,
        EffectCall,
        GateVerdict,
        InvariantCall,
        InvariantResult,
        JobEvent,
        JobReport,
        JobSpec,
        Proposal,
        ProposalRecord,
        Resolution,
        Situation,
        Status,
        StepReport,
        StepSpec,
        UndoCall,
        Unresolvable,
        allowed_options,
        judge,
        resolve_refs,
    )

__all__ = ["WORKFLOW_NAME", "SagaJob"]

WORKFLOW_NAME = "agent_saga.SagaJob"
T = TypeVar("T")

# Effects and undos run once per activity: a second run is the workflow's decision,
# taken only after a reconciler said the first did not land. Reads retry on their own.
_ONCE = RetryPolicy(maximum_attempts=1)
_READS = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
_STANDING = ("compensated", "kept")


def _failure(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}" if cause.type and cause.type != NOT_APPLIED else cause.message
    return str(cause) if cause is not None else str(err)


def _landed(exists: bool | None) -> str:
    return "landed" if exists is True else "did not land" if exists is False else "cannot tell"


def _not_applied(err: ActivityError) -> bool:
    return isinstance(err.cause, ApplicationError) and err.cause.type == NOT_APPLIED


@workflow.defn(name=WORKFLOW_NAME)
class SagaJob:
    def __init__(self) -> None:
        self._report = JobReport("", "")
        self._job: JobSpec | None = None
        self._pending: Resolution | None = None

    # -- the public surface: run, report, resolve ----------------------------------------

    @workflow.run
    async def run(self, job: JobSpec) -> JobReport:
        self._job = job
        saga_id = workflow.info().workflow_id
        self._report = JobReport(saga_id, job.name)
        self._publish(Status.RUNNING)
        admitted, error = await self._read(ACTIVITY.ADMIT, AdmitCall(saga_id, job.name, job.tags), GateVerdict)
        if admitted is None or not admitted.allowed:
            why = error or (admitted.reason if admitted else "")
            return self._end(Status.ABORTED_CLEAN, f"the gate refused to start the job: {why}")
        self._event("saga_started", "", job.name)
        cause = await self._forward()
        if cause is None:
            return self._end(Status.SUCCEEDED_VERIFIED)
        return await self._unwind(cause)

    @workflow.query(name="report")
    def report(self) -> JobReport:
        return self._report

    @workflow.signal(name="resolve")
    def resolve_signal(self, resolution: Resolution) -> None:
        problem = self._problem(resolution)
        if problem:
            # A signal cannot be refused to its sender: it is recorded, never dropped.
            self._report.rejected.append(f"{resolution.by!r}: {problem}")
            workflow.upsert_memo({"rejected": self._report.rejected})
            return
        self._pending = resolution

    @workflow.update(name="resolve")
    async def resolve_update(self, resolution: Resolution) -> str:
        self._pending = resolution
        await workflow.wait_condition(
            lambda: self._pending is None and self._report.status != Status.COMPENSATING
        )
        return self._report.status

    @resolve_update.validator
    def _validate(self, resolution: Resolution) -> None:
        problem = self._problem(resolution)
        if problem:
            raise ValueError(problem)

    def _problem(self, resolution: Resolution) -> str:
        if self._report.status != Status.WAITING_FOR_PERSON or self._pending is not None:
            return f"the job is not waiting for a person (it is {self._report.status})"
        return resolution.problem()

    # -- forward --------------------------------------------------------------------------

    @property
    def job(self) -> JobSpec:
        assert self._job is not None
        return self._job

    async def _forward(self) -> str | None:
        """Turns until the agent finishes and the invariants hold (None), or the cause to unwind."""
        job, report, limits = self.job, self._report, self.job.limits
        refusals = 0
        for turn in range(1, limits.max_turns + 1):
            done = [s.name for s in report.steps if s.state == "committed"]
            options = allowed_options(job, done)
            refused = [p for p in report.proposals if not p.accepted]
            situation = Situation(report.saga_id, turn, job.goal, job.facts, done, options, refused)
            proposal, error = await self._read(ACTIVITY.DECIDE, situation, Proposal)
            if proposal is None:
                return f"the decision driver failed: {error}"
            refusal = judge(proposal, options, limits)
            spec: StepSpec | None = None
            call: EffectCall | None = None
            if refusal is None and proposal.choice != job.finish:
                spec = job.step(proposal.choice)
                call = self._effect_call(turn, spec, proposal.args)
                verdict, error = await self._read(ACTIVITY.GATE, call, GateVerdict)
                if verdict is None or not verdict.allowed:
                    rule = verdict.rule if verdict else ""
                    refusal = ("gate", (f"{rule}: " if rule else "") + (verdict.reason if verdict else error))
            self._record(turn, proposal, refusal)
            if refusal is not None:
                refusals += 1
                if refusals > limits.max_refusals:
                    return f"{refusals} proposals refused (the job allows {limits.max_refusals}); last: {refusal[1]}"
                continue
            if spec is None or call is None:
                return await self._check_invariants()
            cause = await self._run_step(call, spec)
            if cause is not None:
                return cause
        return f"the agent did not finish within {limits.max_turns} turns"

    def _effect_call(self, turn: int, spec: StepSpec, args: dict[str, Any]) -> EffectCall:
        saga_id = self._report.saga_id
        key = operation_id(saga_id, turn, spec.effect, "forward")
        return EffectCall(saga_id, turn, spec.name, spec.effect, spec.semantics, args, key, self.job.tags)

    def _record(self, turn: int, proposal: Proposal, refusal: tuple[str, str] | None) -> None:
        rule, why = refusal if refusal is not None else ("", "")
        record = ProposalRecord(
            turn, str(proposal.choice), dict(proposal.args) if isinstance(proposal.args, dict) else {},
            proposal.confidence if isinstance(proposal.confidence, (int, float)) else -1.0,
            str(proposal.reason), refusal is None, rule, why,
        )
        self._report.proposals.append(record)
        self._event("proposal_recorded", record.choice, "accepted" if refusal is None else f"refused: {rule}")
        if refusal is not None:
            # Into the history now, so an export of a job still running shows the refusal.
            workflow.upsert_memo({f"refusal.{turn}": {
                "choice": record.choice, "args": record.args, "confidence": record.confidence,
                "rule": rule, "reason": why,
            }})

    async def _check_invariants(self) -> str | None:
        report = self._report
        results = {s.name: s.result for s in report.steps if s.state == "committed"}
        call = InvariantCall(report.saga_id, self.job.invariants, self.job.facts, results)
        checks, error = await self._read(ACTIVITY.INVARIANTS, call, list[InvariantResult])
        if checks is None:
            self._event("invariant_evaluated", self.job.finish, "could not be checked")
            return f"the invariants could not be checked: {error}"
        report.checks = checks
        failed = [c for c in checks if c.holds is not True]
        held = len(checks) - len(failed)
        self._event("invariant_evaluated", self.job.finish, f"{held} of {len(self.job.invariants)} hold")
        if not failed and len(checks) == len(self.job.invariants):
            return None
        return "; ".join(
            f"invariant {c.name} " + ("does not hold" if c.holds is False else "could not be checked")
            + (f": {c.detail}" if c.detail else "")
            for c in failed
        ) or "not every invariant was checked"

    async def _run_step(self, call: EffectCall, spec: StepSpec) -> str | None:
        """Run one step's effect; settle a failure with its reconciler before anything else."""
        limits = self.job.limits
        step = StepReport(call.step, spec.name, call.tool, spec.semantics, "unknown", call.key, call.args)
        self._report.steps.append(step)
        for attempt in range(1, limits.effect_attempts + 1):
            try:
                step.result = await workflow.execute_activity(
                    ACTIVITY.EFFECT, call,
                    start_to_close_timeout=timedelta(seconds=limits.step_timeout_seconds),
                    heartbeat_timeout=timedelta(seconds=limits.heartbeat_seconds),
                    retry_policy=_ONCE,
                )
            except ActivityError as err:
                failure = _failure(err)
                if _not_applied(err):
                    self._event("effect_outcome_recorded", spec.name, "not_applied")
                    step.state, step.detail = "not_applied", failure
                    return f"{spec.name} did not happen: {failure}"
                self._event("effect_outcome_recorded", spec.name, "unknown: the effect failed")
                answer, error = await self._read(ACTIVITY.RECONCILE, call, Answer)
                seen = answer or Answer(None, None, f"the reconciler could not be asked: {error}")
                self._event("reconciliation_recorded", spec.name, _landed(seen.exists))
                if seen.exists is True:
                    step.state, step.result, step.reconciled = "committed", seen.result, seen.detail or "landed"
                    return None
                if seen.exists is False and attempt < limits.effect_attempts:
                    continue  # certainly did not land: run it again, with the same key
                if seen.exists is False:
                    step.state, step.detail = "not_applied", f"{failure}; reconciler: {seen.detail}"
                    return f"{spec.name} did not happen after {attempt} runs: {step.detail}"
                step.detail = f"{failure}; reconciler could not tell: {seen.detail}"
                return f"{spec.name} may have happened: {step.detail}"
            self._event("effect_outcome_recorded", spec.name, "committed")
            step.state = "committed"
            return None
        raise AssertionError("unreachable: the loop returns on its last attempt")

    # -- backward ------------------------------------------------------------------------

    async def _unwind(self, cause: str) -> JobReport:
        report = self._report
        report.cause = cause
        while True:
            self._publish(Status.COMPENSATING)
            await self._undo_all()
            standing = [s for s in report.steps if s.state != "not_applied" and s.outcome not in _STANDING]
            if not standing:
                undone = any(s.outcome == "compensated" for s in report.steps)
                return self._end(Status.COMPENSATED_VERIFIED if undone else Status.ABORTED_CLEAN)
            report.waiting = "; ".join(f"step {s.step} {s.name}: {s.outcome}: {s.detail}" for s in standing)
            self._event("escalated", "", f"{len(standing)} step(s) stand unproven")
            self._publish(Status.WAITING_FOR_PERSON)
            await workflow.wait_condition(lambda: self._pending is not None)
            resolution, self._pending = self._pending, None
            assert resolution is not None
            report.resolutions.append(resolution)
            self._event("resolution_recorded", "", resolution.decision)
            workflow.upsert_memo({"resolutions": [vars(r) for r in report.resolutions]})
            if resolution.decision == "accept":
                return self._end(Status.RESOLVED_BY_PERSON)
            for s in standing:  # retry: undo again whatever still stands
                s.outcome = ""
            report.waiting = ""

    async def _undo_all(self) -> None:
        """Newest first; stop at an undo that cannot be proven (what is older may depend on it)."""
        halted: int | None = None
        for step in reversed(self._report.steps):
            if step.state == "not_applied" or step.outcome in _STANDING:
                continue
            if halted is not None:
                step.outcome, step.detail = "unresolved", f"not attempted: the undo stopped at step {halted}"
                continue
            spec = self.job.step(step.name)
            if spec.undo is None:
                self._without_undo(step, spec)
                continue
            sources: dict[str, Any] = {"facts": self.job.facts, "args": step.args}
            if step.state == "committed":
                sources["result"] = step.result
            try:
                kwargs = resolve_refs(spec.undo.args, sources)
            except Unresolvable as err:
                step.outcome = "unresolved"
                step.detail = f"the undo's arguments cannot be built ({err}): the outcome is unknown"
                continue
            await self._undo(step, spec.undo.handler, kwargs)
            if step.outcome != "compensated":
                halted = step.step

    @staticmethod
    def _without_undo(step: StepReport, spec: StepSpec) -> None:
        if spec.semantics == "REVERSIBLE":
            step.outcome, step.detail = "kept", "REVERSIBLE with nothing to undo"
        elif step.state == "committed":
            step.outcome = "orphaned"
            step.detail = "IRREVERSIBLE: no undo exists" if spec.semantics == "IRREVERSIBLE" else "no undo declared"
        else:
            step.outcome, step.detail = "unresolved", "the outcome is unknown and no undo is declared"

    async def _undo(self, step: StepReport, handler: str, kwargs: dict[str, Any]) -> None:
        """Run the undo, then check it is in effect; run it again only if the check says it is not."""
        limits = self.job.limits
        step.undo_handler = handler
        step.undo_key = operation_id(self._report.saga_id, step.step, step.tool, "compensate")
        self._report.undo_order.append(handler)
        call = UndoCall(self._report.saga_id, step.step, handler, kwargs, step.undo_key)
        for attempt in range(1, limits.undo_attempts + 1):
            step.undo_attempts = attempt
            ran = "it returned"
            try:
                await workflow.execute_activity(
                    ACTIVITY.UNDO, call,
                    start_to_close_timeout=timedelta(seconds=limits.step_timeout_seconds),
                    heartbeat_timeout=timedelta(seconds=limits.heartbeat_seconds),
                    retry_policy=_ONCE,
                )
            except ActivityError as err:
                ran = f"it failed: {_failure(err)}"
            answer, error = await self._read(ACTIVITY.CHECK_UNDO, call, Answer)
            seen = answer or Answer(None, None, f"the check could not be asked: {error}")
            self._event("compensation_recorded", handler, "in effect" if seen.reversed_ is True
                        else "not in effect" if seen.reversed_ is False else "cannot tell")
            if seen.reversed_ is True:
                step.outcome, step.detail = "compensated", seen.detail or "checked in effect"
                return
            if seen.reversed_ is None:
                # Running it again blind could refund twice: a person decides.
                step.outcome = "unproven"
                step.detail = f"{handler} ran ({ran}) but whether it is in effect could not be told: {seen.detail}"
                return
        step.outcome = "unproven"
        step.detail = f"{handler} is not in effect after {limits.undo_attempts} runs (last: {ran}): {seen.detail}"

    # -- plumbing --------------------------------------------------------------------------

    async def _read(self, name: str, arg: Any, result_type: type[T]) -> tuple[T | None, str]:
        """Run a read-only activity (retried by Temporal); (None, why) if it keeps failing."""
        try:
            value: T = await workflow.execute_activity(
                name, arg, result_type=result_type,
                start_to_close_timeout=timedelta(seconds=self.job.limits.step_timeout_seconds),
                retry_policy=_READS,
            )
        except ActivityError as err:
            return None, _failure(err)
        return value, ""

    def _publish(self, status: Status) -> None:
        """Set the status, and put it (with why) where `temporal workflow describe` and the export see it."""
        report = self._report
        report.status = status.value
        workflow.upsert_memo({
            "status": report.status, "cause": report.cause, "waiting": report.waiting,
            "outcomes": {str(s.step): [s.outcome, s.detail] for s in report.steps if s.outcome},
        })

    def _end(self, status: Status, cause: str = "") -> JobReport:
        if cause:
            self._report.cause = cause
        self._report.waiting = ""
        self._event("terminal_assigned", "", status.value)
        self._publish(status)
        return self._report

    def _event(self, kind: str, step: str, detail: str) -> None:
        """Add to the timeline. Only the report carries it: no command, so a replay is unchanged."""
        events = self._report.events
        events.append(JobEvent(len(events) + 1, kind, step, detail))

