"""``not_applied_on=``: a tool declares which of its errors mean it did nothing.

Without a declaration an ordinary exception leaves the step UNKNOWN (it may have acted), so
the rollback cannot be clean; with one, that error is NOT_APPLIED as ``NotApplied`` is.
"""

from __future__ import annotations

import pytest

from agent_saga import (
    Compensation,
    ConfigurationError,
    MemoryWAL,
    NotApplied,
    RetryPolicy,
    SagaAborted,
    saga_scope,
    tool,
)
from agent_saga.semantics import Outcome, StepState

booked: list[str] = []


def _trip(**declared: object) -> SagaAborted:
    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=lambda: booked.remove(r)))
    def book(city: str) -> str:
        booked.append(city)
        return city

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=lambda: None), **declared)
    def pay(amount: int) -> None:
        raise ValueError(f"amount must be positive, got {amount}")  # refused before any effect

    booked.clear()
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        book("paris")
        pay(-5)
    assert booked == []  # the booking was undone either way
    return caught.value


def test_an_undeclared_error_leaves_the_step_unknown_and_the_report_names_the_fix() -> None:
    report = _trip().report
    (paid,) = [s for s in report.steps if s.tool.endswith("pay")]
    assert paid.state is StepState.UNKNOWN and paid.outcome is Outcome.UNRESOLVED and not report.clean
    text = report.format_text()
    assert f"fix: step {paid.step} {paid.tool} failed and nothing says whether it acted" in text
    assert "not_applied_on=(TheError,)" in text


def test_a_declared_error_is_not_applied_and_the_rollback_is_clean() -> None:
    for declared in (ValueError, (KeyError, ValueError)):
        caught = _trip(not_applied_on=declared)
        report = caught.report
        # A call that did nothing needs no undo: the report is the booking's alone, undone.
        assert [(s.tool.rpartition(".")[2], s.outcome) for s in report.steps] == [("book", Outcome.COMPENSATED)]
        assert report.clean and "fix:" not in report.format_text(), report.format_text()


def test_a_declared_error_is_raised_as_itself_to_the_caller() -> None:
    assert isinstance(_trip(not_applied_on=ValueError).cause, ValueError)  # the framework sees its own error


def test_a_retried_call_whose_attempts_each_did_nothing_is_not_in_doubt() -> None:
    attempts = []

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=lambda: None),
          retry=RetryPolicy(max_attempts=2, base_delay=0), not_applied_on=TimeoutError)
    def reserve() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError("the gateway refused the connection")  # declared: did nothing
        raise NotApplied("sold out")

    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as caught, saga_scope(wal):
        reserve()
    # Had the first attempt counted as "may have landed", the step would be UNKNOWN ("between").
    assert len(attempts) == 2 and caught.value.report.clean
    assert [r["type"] for r in wal.records() if r.get("step") == 1][-1] == "STEP_NOT_APPLIED"


@pytest.mark.parametrize("bad", ["ValueError", (ValueError, 3), KeyboardInterrupt])
def test_anything_but_exception_classes_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^not_applied_on= must be an exception class or a tuple"):
        tool(semantics="REVERSIBLE", not_applied_on=bad)(lambda: None)
