"""The activities: every side effect, decision and question to the world.

The workflow only orders these by name; what they call is found here, in the
worker's process, through the registries (``@effect``, ``@invariant``, the core's
``@compensator`` and ``@reconciler``) and the worker's gate and driver. Each result
is recorded in the workflow's history, so a replay never calls them again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any, Literal

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_saga import ActionSemantics, GatePort, NotApplied, Observation, StepRefused
from agent_saga.gate import SagaInfo, StepRequest
from agent_saga.registry import reconciler_for, registered, resolve
from agent_saga_temporal.drivers import Driver
from agent_saga_temporal.model import (
    ACTIVITY,
    NOT_APPLIED,
    AdmitCall,
    Answer,
    EffectCall,
    GateVerdict,
    InvariantCall,
    InvariantResult,
    Proposal,
    Situation,
    UndoCall,
)
from agent_saga_temporal.registry import Verdict, effect_for, invariant_for

__all__ = ["SagaActivities"]


def _default_gate() -> GatePort | None:
    # The core's default gate honours an operator's kill switch on this host.
    from agent_saga.context import default_gate

    return default_gate()


def _takes_key(fn: Callable[..., Any]) -> bool:
    try:
        return "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


async def _call(fn: Callable[..., Any], kwargs: dict[str, Any], *, heartbeat: bool = False) -> Any:
    """Run a user function (sync on a thread, async on the loop), heartbeating meanwhile if asked.

    The heartbeats tell Temporal this worker is alive however long the call takes; a
    worker that dies stops them, and the step times out within the job's
    ``heartbeat_seconds`` instead of its whole step timeout.
    """
    if inspect.iscoroutinefunction(fn):
        work: asyncio.Future[Any] = asyncio.ensure_future(fn(**kwargs))
    else:
        work = asyncio.ensure_future(asyncio.to_thread(fn, **kwargs))
    if not heartbeat:
        return await work
    while True:
        activity.heartbeat()
        done, _ = await asyncio.wait({work}, timeout=0.5)
        if done:
            return work.result()


def _failed(err: BaseException) -> ApplicationError:
    # Never retried by Temporal: whether to run it again is the workflow's decision,
    # taken only after a reconciler said the first run did not land.
    return ApplicationError(str(err) or type(err).__name__, type=type(err).__name__, non_retryable=True)


def _json_safe(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as err:
        raise ApplicationError(
            f"{what} returned {type(value).__name__}, which is not JSON: return plain "
            "str/int/float/bool/None/list/dict values (the result feeds the undo's arguments)",
            type="ResultNotJSON", non_retryable=True,
        ) from err


def _answer(value: Any, who: str) -> Answer:
    if not isinstance(value, Observation):
        raise ApplicationError(
            f"{who} returned {type(value).__name__}; a reconciler returns an agent_saga.Observation",
            type="NotAnObservation", non_retryable=True,
        )
    return Answer(value.exists, value.reversed_, value.detail, _json_safe(value.result, who))


class SagaActivities:
    """The activities of one worker, bound to its decision driver and its pre-flight gate.

    ``gate="default"`` is the core's default gate (an operator's ``agent-saga halt``
    reaches these jobs too); pass a ``GatePort``, or ``None`` to run without one.
    """

    def __init__(self, driver: Driver, *, gate: GatePort | Literal["default"] | None = "default") -> None:
        if not isinstance(driver, Driver):
            raise TypeError(f"driver must have an async decide(situation) method, got {driver!r}")
        self.driver = driver
        self.gate = _default_gate() if gate == "default" else gate

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.decide, self.admit, self.check_step, self.run_effect, self.reconcile_effect,
            self.run_undo, self.check_undo, self.check_invariants,
        ]

    @activity.defn(name=ACTIVITY.DECIDE)
    async def decide(self, situation: Situation) -> Proposal:
        proposal: object = await self.driver.decide(situation)  # a driver may not keep its promise
        if not isinstance(proposal, Proposal):
            # Still recorded and refused by the workflow, never dropped.
            return Proposal(repr(proposal)[:200], {}, 0.0, "the driver did not return a Proposal")
        return proposal

    @activity.defn(name=ACTIVITY.ADMIT)
    async def admit(self, call: AdmitCall) -> GateVerdict:
        if self.gate is None:
            return GateVerdict(True)
        try:
            self.gate.admit(SagaInfo(call.saga_id, call.name, frozenset(call.tags)))
        except StepRefused as refused:
            return GateVerdict(False, refused.reason, refused.rule or "")
        except Exception as err:  # noqa: BLE001 - a gate that cannot answer refuses (fail closed)
            return GateVerdict(False, f"the gate could not answer: {_describe(err)}", "gate-error")
        return GateVerdict(True)

    @activity.defn(name=ACTIVITY.GATE)
    async def check_step(self, call: EffectCall) -> GateVerdict:
        if self.gate is None:
            return GateVerdict(True)
        try:
            await self.gate.check_async(self._request(call))
        except StepRefused as refused:
            return GateVerdict(False, refused.reason, refused.rule or "")
        except Exception as err:  # noqa: BLE001 - fail closed, and say why
            return GateVerdict(False, f"the gate could not answer: {_describe(err)}", "gate-error")
        return GateVerdict(True)

    @staticmethod
    def _request(call: EffectCall) -> StepRequest:
        return StepRequest(
            call.saga_id, call.step, call.name, ActionSemantics.parse(call.semantics), call.args,
            frozenset(call.tags),
        )

    @activity.defn(name=ACTIVITY.EFFECT)
    async def run_effect(self, call: EffectCall) -> Any:
        fn = effect_for(call.tool)
        if fn is None:
            raise ApplicationError(
                f"no effect named {call.tool!r} is registered in this worker: import the module that "
                "declares it with @effect before starting the worker",
                type=NOT_APPLIED, non_retryable=True, category=ApplicationErrorCategory.BENIGN,
            )
        kwargs = dict(call.args)
        if _takes_key(fn):
            kwargs["idempotency_key"] = call.key
        error: BaseException | None = None
        try:
            result = await _call(fn, kwargs, heartbeat=True)
        except NotApplied as err:
            error = err
            # An expected business answer ("declined"), not a worker problem: logged at DEBUG.
            raise ApplicationError(
                str(err) or type(err).__name__, type=NOT_APPLIED, non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from err
        except Exception as err:
            error = err
            raise _failed(err) from err
        finally:
            if self.gate is not None:
                self.gate.observe(self._request(call), error)
        return _json_safe(result, f"effect {call.tool!r}")

    @activity.defn(name=ACTIVITY.RECONCILE)
    async def reconcile_effect(self, call: EffectCall) -> Answer:
        fn = reconciler_for(call.tool)
        if fn is None:
            return Answer(None, None, f"no @reconciler is registered for {call.tool!r}")
        # Like the core's engine: the step's arguments and its idempotency key.
        return _answer(await _call(fn, {**call.args, "idempotency_key": call.key}), f"reconciler {call.tool!r}")

    @activity.defn(name=ACTIVITY.UNDO)
    async def run_undo(self, call: UndoCall) -> None:
        if not registered(call.handler):
            raise ApplicationError(
                f"no compensator named {call.handler!r} is registered in this worker: import the module "
                "that declares it with @compensator",
                type="CompensatorMissing", non_retryable=True,
            )
        fn = resolve(call.handler)
        kwargs = dict(call.kwargs)
        if _takes_key(fn):
            kwargs["idempotency_key"] = call.key
        try:
            await _call(fn, kwargs, heartbeat=True)
        except Exception as err:
            raise _failed(err) from err

    @activity.defn(name=ACTIVITY.CHECK_UNDO)
    async def check_undo(self, call: UndoCall) -> Answer:
        fn = reconciler_for(call.handler)
        if fn is None:
            return Answer(None, None, f"no @reconciler is registered for the compensator {call.handler!r}")
        kwargs = dict(call.kwargs)
        if _takes_key(fn):
            kwargs["idempotency_key"] = call.key
        return _answer(await _call(fn, kwargs), f"reconciler {call.handler!r}")

    @activity.defn(name=ACTIVITY.INVARIANTS)
    async def check_invariants(self, call: InvariantCall) -> list[InvariantResult]:
        results = []
        for name in call.names:
            fn = invariant_for(name)
            if fn is None:
                results.append(InvariantResult(name, None, f"no @invariant named {name!r} is registered"))
                continue
            try:
                value = await _call(fn, {"facts": call.facts, "results": call.results})
            except Exception as err:  # noqa: BLE001 - a check that fails could not tell
                results.append(InvariantResult(name, None, f"the check failed: {_describe(err)}"))
                continue
            if isinstance(value, Verdict):
                results.append(InvariantResult(name, value.holds, value.detail))
            elif value is None or isinstance(value, bool):
                results.append(InvariantResult(name, value, ""))
            else:
                results.append(InvariantResult(
                    name, None, f"returned {type(value).__name__}; an invariant returns True, False, None or a Verdict"
                ))
        return results
