"""verify_rollback_invariants: every failure shape up to N steps, on the real engine.

The engine passes at N = 6; engines with a deliberately injected bug are caught,
with the broken invariant named and the counterexample minimised.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agent_saga import ConfigurationError, RetryPolicy, RollbackReport, Saga, SagaAborted, saga_scope
from agent_saga.proving import INVARIANTS, verify_rollback_invariants
from agent_saga.proving._invariants import BOUNDED, HONEST_CLEAN, LIFO, ORPHANS, check, expected
from agent_saga.proving._shapes import Failing, Shape, Undo, count, run_shape, shapes
from agent_saga.semantics import Outcome

W, R, N = Undo.WORKS, Undo.REFUSES, Undo.NONE


@pytest.mark.slow  # heavy (many examples or shapes): left to the full core env
async def test_the_engine_keeps_every_invariant_over_every_shape_up_to_six_steps() -> None:
    report = await verify_rollback_invariants(max_steps=6)

    assert report.ok, report.format_text()
    assert report.shapes == report.total == count(6) == 2432
    text = report.format_text()
    assert "2432 of 2432 failure shape(s) explored" in text
    assert "7 invariants: " + ", ".join(INVARIANTS) in text
    assert "result: no violation" in text
    assert "one step after another; not a proof for longer sagas (calls in flight at once: " in text


@pytest.mark.slow
def test_the_one_liner_runs_and_reports_no_violation() -> None:
    # The seed's line, exactly.
    line = ("import asyncio; from agent_saga import verify_rollback_invariants; "
            "print(asyncio.run(verify_rollback_invariants(max_steps=6)).format_text())")
    out = subprocess.run([sys.executable, "-c", line], capture_output=True, text=True, timeout=300,
                         check=True, env={**os.environ, "PYTHONWARNINGS": "error"}).stdout
    assert "result: no violation" in out and "2432 of 2432" in out


def test_the_shapes_are_distinct_smallest_first_and_counted() -> None:
    for n in range(1, 7):
        every = list(shapes(n))
        assert len(every) == len(set(every)) == count(n)
        assert [s.size for s in every] == sorted(s.size for s in every)
        # at most one committed step without an undo; every refusal subset otherwise
        assert all(s.committed.count(N) <= 1 for s in every)
    assert (count(8), count(10)) == (12800, 63488)  # the figures docs/PROVING.md states
    assert {s.committed for s in shapes(2) if s.size == 2 and s.failing is Failing.NONE} == {
        (W, W), (W, R), (R, W), (R, R), (N, W), (N, R), (W, N), (R, N)}


def test_the_rules_each_shape_is_held_to() -> None:
    # refusing undo at step 3 with halt: step 4 (unknown, no undo) unresolved, 3 failed, 2 and 1 stranded
    want = expected(Shape((W, N, R), Failing.UNKNOWN_NO_UNDO, halt=True))
    assert want.outcomes == {4: Outcome.UNRESOLVED, 3: Outcome.FAILED, 2: Outcome.UNRESOLVED,
                             1: Outcome.UNRESOLVED}
    assert want.halted_at == 3 and not want.clean
    # without halt the older steps are settled: 2 orphaned, 1 compensated (odd: after one retry)
    want = expected(Shape((W, N, R), Failing.NOT_APPLIED, halt=False))
    assert want.outcomes == {3: Outcome.FAILED, 2: Outcome.ORPHANED, 1: Outcome.COMPENSATED}
    assert want.attempts == {3: 3, 1: 2}
    assert expected(Shape((W, W), Failing.UNKNOWN_UNDO_WORKS)).clean


@pytest.mark.parametrize("max_steps", [0, 11, 2.0, True, "6"])
async def test_a_bound_outside_1_to_10_is_refused(max_steps: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_steps must be an int from 1 to 10"):
        await verify_rollback_invariants(max_steps=max_steps)


# -- engines with a bug injected on purpose ----------------------------------------------


class FifoSaga(Saga):
    """The real engine, with one bug: it unwinds oldest first."""

    def _rollback(self, cause: BaseException) -> Any:
        with self._lock:
            self._steps.reverse()
        return super()._rollback(cause)


@asynccontextmanager
async def fifo_scope(wal: Any, **options: Any) -> AsyncIterator[Saga]:
    """saga_scope's contract, around FifoSaga."""
    saga = FifoSaga(wal, **options)
    saga.start()
    try:
        yield saga
    except Exception as err:
        raise SagaAborted(err, await saga.rollback(err)) from err
    await saga.complete()


def doctored(edit: Callable[[RollbackReport], RollbackReport]) -> Callable[..., Any]:
    """saga_scope, but the report it hands back is edited (a report that lies)."""

    @asynccontextmanager
    async def scope(wal: Any, **options: Any) -> AsyncIterator[Saga]:
        try:
            async with saga_scope(wal, **options) as saga:
                yield saga
        except SagaAborted as aborted:
            raise SagaAborted(aborted.cause, edit(aborted.report)) from aborted.cause

    return scope


def claims_clean(report: RollbackReport) -> RollbackReport:
    steps = tuple(dataclasses.replace(s, outcome=Outcome.COMPENSATED) if s.outcome is Outcome.FAILED else s
                  for s in report.steps)
    return dataclasses.replace(report, steps=steps, halted=False)


def drops_orphans(report: RollbackReport) -> RollbackReport:
    return dataclasses.replace(report, steps=tuple(s for s in report.steps if s.outcome is not Outcome.ORPHANED))


@asynccontextmanager
async def patient_scope(wal: Any, **options: Any) -> AsyncIterator[Saga]:
    """saga_scope, ignoring the retry bound it is given."""
    options["compensation_retry"] = RetryPolicy(max_attempts=5, backoff="constant", base_delay=0)
    async with saga_scope(wal, **options) as saga:
        yield saga


async def test_an_engine_that_unwinds_oldest_first_is_caught_and_minimised() -> None:
    assert "_rollback" in vars(Saga), "FifoSaga's injected bug no longer reaches the engine: rewrite it"

    report = await verify_rollback_invariants(max_steps=4, scope=fifo_scope)

    assert not report.ok and report.counterexample is not None
    example = report.counterexample
    assert example.violations[0][0] == LIFO
    assert example.shape == Shape((W, W), Failing.NONE, halt=False)  # two steps, nothing else
    assert example.found == Shape((W, W), Failing.NONE, halt=True)  # first met, before minimising
    assert report.shapes < report.total  # it stopped at the first counterexample
    text = report.format_text()
    assert "VIOLATION of LIFO order" in text
    assert "undos ran in the order [1, 2], not newest first" in text
    assert "shape (minimised): step 1 undo works; step 2 undo works; the saga fails after step 2; no halt" in text


@pytest.mark.parametrize(("scope", "invariant", "shape"), [
    (doctored(claims_clean), HONEST_CLEAN, Shape((R,), Failing.NONE, halt=False)),
    (doctored(drops_orphans), ORPHANS, Shape((N,), Failing.NONE, halt=False)),
    (patient_scope, BOUNDED, Shape((R,), Failing.NONE, halt=False)),
])
async def test_an_engine_that_breaks_a_promise_is_caught(scope: Any, invariant: str, shape: Shape) -> None:
    report = await verify_rollback_invariants(max_steps=3, scope=scope)

    assert report.counterexample is not None, report.format_text()
    assert invariant in {name for name, _ in report.counterexample.violations}
    assert report.counterexample.shape == shape


async def test_a_scope_that_returns_no_report_is_a_violation_not_a_crash() -> None:
    @asynccontextmanager
    async def swallowing(wal: Any, **options: Any) -> AsyncIterator[Saga]:
        try:
            async with saga_scope(wal, **options) as saga:
                yield saga
        except SagaAborted:
            pass  # the failure vanishes, and with it the report

    run = await run_shape(Shape((W,)), swallowing)
    assert run.report is None
    assert check(run) == [("exactly one outcome per step",
                           "the saga failed but no rollback report came back (the scope committed)")]
