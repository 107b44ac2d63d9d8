"""The circuit breaker: trips, one trial call, recovery; and the three places the obvious answer is wrong."""

from __future__ import annotations

import pytest
from gate_support import Clock, req
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    BreakerPolicy,
    BudgetLimit,
    CircuitBreaker,
    Compensation,
    ConfigurationError,
    MemoryWAL,
    PreFlightGate,
    RetryPolicy,
    SagaAborted,
    StepRefused,
    saga_scope,
    set_breaker,
)
from agent_saga.gate import LocalBreakerStore, MemoryLimitStore

pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


def run(breaker: CircuitBreaker, ok: bool, tool: str = "stripe.charge") -> None:
    """One call through the breaker that runs and succeeds or raises."""
    request = req(tool)
    breaker.before(request)
    breaker.observe(request, None if ok else ConnectionError("stripe timed out"))


def is_open(breaker: CircuitBreaker, tool: str = "stripe.charge") -> bool:
    request = req(tool)
    refusal: StepRefused | None = None
    try:
        probe = breaker.before(request)
    except StepRefused as refused:
        refusal = refused
    if refusal is not None:
        assert refusal.rule == f"breaker:{tool}"
        return True
    if probe:
        breaker.release(request)
    return False


def test_consecutive_failures_trip_it_and_a_success_resets_the_count() -> None:
    b = CircuitBreaker(BreakerPolicy(failure_threshold=3, failure_rate=None))
    for ok in (False, False, True, False, False):
        run(b, ok)
    assert not is_open(b)  # never three in a row
    run(b, False)
    assert is_open(b)
    assert not is_open(b, "pinecone.upsert")  # one key per tool


def test_the_failure_rate_needs_its_minimum_volume() -> None:
    b = CircuitBreaker(BreakerPolicy(failure_threshold=None, failure_rate=0.5, min_volume=10, window=60))
    for _ in range(5):
        run(b, False)
    assert not is_open(b)  # 100% of 5 calls means nothing yet
    for ok in (True, True, True, True):
        run(b, ok)
    assert not is_open(b)  # 5/9
    run(b, True)
    assert not is_open(b)  # 5/10, but a success is never what opens a breaker
    run(b, False)  # 6/11
    assert is_open(b)


def test_old_outcomes_leave_the_rate_window() -> None:
    clock = Clock()
    b = CircuitBreaker(BreakerPolicy(failure_threshold=None, failure_rate=0.5, min_volume=4, window=10), clock=clock)
    for ok in (False, False, True):
        run(b, ok)
    clock.advance(11)
    for ok in (True, True, True, False):
        run(b, ok)
    assert not is_open(b)  # 1/4 in the window; 3/7 had it counted the expired failures


def test_cool_down_then_exactly_one_trial_call_then_recovery_all_logged() -> None:
    clock, wal = Clock(), MemoryWAL()
    b = CircuitBreaker(BreakerPolicy(failure_threshold=2, failure_rate=None, cool_down=30), wal=wal, clock=clock)
    run(b, False)
    run(b, False)
    clock.advance(29)
    assert is_open(b)
    clock.advance(1)
    trial = req()
    assert b.before(trial) is True
    with pytest.raises(StepRefused, match="next trial call"):
        b.before(req())  # a second caller while the trial is in flight
    b.observe(trial, None)
    assert not is_open(b)
    run(b, True)
    assert [r["type"] for r in wal.records()] == ["BREAKER_TRIPPED", "BREAKER_PROBE", "BREAKER_RECOVERED"]
    tripped = next(iter(wal.records()))
    assert tripped["body"]["consecutive"] == 2
    assert "timed out" in tripped["body"]["error"]


def test_a_failed_trial_reopens_for_a_fresh_cool_down() -> None:
    clock = Clock()
    b = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None, cool_down=30), clock=clock)
    run(b, False)
    clock.advance(30)
    trial = req()
    assert b.before(trial)
    clock.advance(5)
    b.observe(trial, TimeoutError("still down"))
    clock.advance(29)
    assert is_open(b)  # 34 s after the first trip, but only 29 after the failed trial
    clock.advance(1)
    assert not is_open(b)


def test_a_trial_that_never_reports_back_is_replaced_after_a_cool_down() -> None:
    clock = Clock()
    b = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None, cool_down=10), clock=clock)
    run(b, False)
    clock.advance(10)
    assert b.before(req())  # its process dies: no observe ever comes
    clock.advance(9)
    assert is_open(b)
    clock.advance(1)
    assert b.before(req())


def test_a_refusal_is_not_a_failure() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=2, failure_rate=None))
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=10, window=60)],
                         breaker=breaker, store=MemoryLimitStore())
    for _ in range(10):
        with pytest.raises(SagaAborted), saga_scope(MemoryWAL(), gate=gate) as s:
            s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=lambda: 1, args={"amount": 50},
                      compensate=lambda r: Compensation(fn=lambda: None))
    for _ in range(3):  # e.g. a nested gate refusing inside a tool: still not the dependency failing
        breaker.observe(req(), StepRefused("stripe.charge", "over budget", "limit:b"))
    assert not is_open(breaker)
    gate.check(req(amount=10))


def test_a_trial_refused_later_in_the_gate_frees_the_trial_slot() -> None:
    clock = Clock()
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None, cool_down=10), clock=clock)
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=10, window=60)],
                         breaker=breaker, store=MemoryLimitStore())
    run(breaker, False)
    clock.advance(10)
    with pytest.raises(StepRefused, match="over limit"):
        gate.check(req(amount=50))  # admitted as the trial, then refused by the budget
    trial = req(amount=5)
    gate.check(trial)  # not "trial in flight": the refused one never ran
    gate.observe(trial, None)
    assert not is_open(breaker)


def test_the_breaker_never_blocks_a_rollback_and_failing_refunds_do_not_feed_it() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None))
    set_breaker(breaker)  # the process-wide breaker, used by the implicit default gate
    refunds: list[str] = []

    def refund_ok(charge_id: str) -> None:
        refunds.append(charge_id)

    def charge_fails() -> None:
        raise ConnectionError("stripe is down")

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                  compensate=lambda r: Compensation(fn=refund_ok, kwargs={"charge_id": r["id"]}))
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=charge_fails,
                  compensate=Compensation(fn=refund_ok, kwargs={"charge_id": "never"}))
    # The second charge tripped the breaker for stripe.charge; the refund of the first still ran.
    assert is_open(breaker)
    # Both undos ran with the breaker open: the timed-out charge's (it may have landed) and ch_1's.
    assert refunds == ["never", "ch_1"]
    assert info.value.report.clean

    # Refunds that keep failing leave a fresh breaker closed: compensations never reach it.
    fresh = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None))
    set_breaker(fresh)

    def refund_fails(charge_id: str) -> None:
        raise ConnectionError("refund endpoint down")

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL(), compensation_retry=RetryPolicy(max_attempts=2)) as s:
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_2"},
                  compensate=lambda r: Compensation(fn=refund_fails, kwargs={"charge_id": r["id"]}))
        raise RuntimeError("agent gave up")
    assert not info.value.report.clean
    assert not is_open(fresh)


def test_policy_validation_names_the_bad_field() -> None:
    with pytest.raises(ConfigurationError, match="failure_rate must be in"):
        BreakerPolicy(failure_rate=1.5)
    with pytest.raises(ConfigurationError, match="failure_threshold or failure_rate"):
        BreakerPolicy(failure_threshold=None, failure_rate=None)
    with pytest.raises(ConfigurationError, match="cool_down"):
        BreakerPolicy(cool_down=0)
    with pytest.raises(ConfigurationError, match="set_breaker"):
        set_breaker("on")  # type: ignore[arg-type]


def _model_trips(outcomes: list[bool], threshold: int, rate: float, min_volume: int) -> int | None:
    """Index of the call after which a breaker with no time passing first opens, or None."""
    consecutive, fails = 0, 0
    for i, ok in enumerate(outcomes):
        calls = i + 1
        fails += not ok
        consecutive = 0 if ok else consecutive + 1
        if not ok and (consecutive >= threshold or (calls >= min_volume and fails / calls >= rate)):
            return i
    return None


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.integers(1, 6), st.sampled_from([0.25, 0.5, 0.75, 1.0]), st.integers(1, 12),
)
def test_the_local_store_trips_exactly_when_the_policy_says(
    outcomes: list[bool], threshold: int, rate: float, min_volume: int
) -> None:
    policy = BreakerPolicy(failure_threshold=threshold, failure_rate=rate, min_volume=min_volume)
    store = LocalBreakerStore()
    tripped_at = None
    for i, ok in enumerate(outcomes):
        assert store.before("k", f"op{i}", 0.0, policy).decision == "allow"
        if store.record("k", f"op{i}", ok, 0.0, policy).transition == "tripped":
            tripped_at = i
            break
    assert tripped_at == _model_trips(outcomes, threshold, rate, min_volume)


def test_an_open_breaker_refuses_before_the_limits_spend_anything() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None))
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=100, window=60)],
                         breaker=breaker, store=MemoryLimitStore())
    run(breaker, False)
    for _ in range(5):
        with pytest.raises(StepRefused) as info:
            gate.check(req(amount=100))
        assert info.value.rule == "breaker:stripe.charge"
    gate.check(req("other.tool", amount=100))  # the whole budget is still there

