"""The saga state machine: ordering, outcomes, retries, timeouts, faces, isolation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_saga import (
    ActionSemantics,
    Compensation,
    CompensationError,
    MemoryWAL,
    NotApplied,
    Outcome,
    RetryPolicy,
    SagaAborted,
    SagaClosed,
    StepState,
    call_with,
    compensator,
    current_saga,
    saga_scope,
)
from agent_saga.engine.report import RollbackReport
from agent_saga.engine.saga import Saga
from agent_saga.ids import operation_id
from agent_saga.registry import unregister

C = ActionSemantics.COMPENSABLE
R = ActionSemantics.REVERSIBLE
I = ActionSemantics.IRREVERSIBLE  # noqa: E741


class World:
    """A tiny stand-in for the outside systems: effects applied and undone."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.keys: list[str | None] = []
        self.lock = threading.Lock()

    def do(self, name: str) -> dict[str, str]:
        with self.lock:
            self.log.append(f"do {name}")
        return {"id": f"{name}-id"}

    def undo(self, name: str, idempotency_key: str | None = None) -> None:
        with self.lock:
            self.log.append(f"undo {name}")
            self.keys.append(idempotency_key)


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    compensator("eng.undo")(w.undo)
    yield w
    unregister("eng.undo")


def undo_by(world: World) -> Any:
    return lambda r: Compensation(fn=world.undo, handler="eng.undo", kwargs={"name": r["id"]})


async def test_rollback_is_lifo_and_derived_from_each_result(world: World) -> None:
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(wal) as s:
            for name in ("a", "b", "c"):
                await s.execute(tool=f"t.{name}", semantics=C, forward=lambda n=name: world.do(n),
                                compensate=undo_by(world))
            raise ValueError("model hallucinated a region")
    assert world.log == ["do a", "do b", "do c", "undo c-id", "undo b-id", "undo a-id"]
    report = info.value.report
    assert report.clean and not report.halted
    assert [s.step for s in report.compensated] == [3, 2, 1]
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.cause is info.value.__cause__
    types = [r["type"] for r in wal.records()]
    assert types[0] == "SAGA_STARTED" and types[-1] == "SAGA_ROLLED_BACK"
    assert types.count("STEP_INTENT") == 3 and types.count("STEP_COMPENSATED") == 3


async def test_compensation_keys_are_deterministic_and_passed(world: World) -> None:
    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL(), saga_id="fixed-saga") as s:
            await s.execute(tool="t.a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
            raise RuntimeError
    assert world.keys == [operation_id("fixed-saga", 1, "t.a", "compensate")]


async def test_forward_gets_its_operation_id_when_it_asks() -> None:
    seen: list[str] = []

    def charge(idempotency_key: str) -> int:
        seen.append(idempotency_key)
        return 1

    async with saga_scope(MemoryWAL(), saga_id="s1") as s:
        await s.execute(tool="pay", semantics=R, forward=charge)
    assert seen == [operation_id("s1", 1, "pay", "forward")]


async def test_success_commits_and_runs_no_undo(world: World) -> None:
    wal = MemoryWAL()
    async with saga_scope(wal) as s:
        out = await s.execute(tool="t.a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
    assert out == {"id": "a-id"}
    assert world.log == ["do a"]
    assert [r["type"] for r in wal.records()][-1] == "SAGA_COMPLETED"
    assert s.report is None


async def test_unknown_outcome_with_an_undo_known_before_the_call_is_compensated(world: World) -> None:
    def charge_times_out() -> None:
        world.do("charge")
        raise TimeoutError("gateway timeout")  # it may well have landed

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=charge_times_out,
                            compensate=call_with(world.undo, name="charge"))
    (step,) = info.value.report.steps
    assert step.state is StepState.UNKNOWN and step.outcome is Outcome.COMPENSATED
    assert info.value.report.clean
    assert world.log == ["do charge", "undo charge"]


async def _a_then_pay(world: World, pay: Callable[[], None]) -> RollbackReport:
    """Step ``t.a``, then a ``pay`` step whose call ``pay`` fails: the report of the rollback that follows."""
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="t.a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
            await s.execute(tool="pay", semantics=C, forward=pay, compensate=undo_by(world))
    return info.value.report


async def test_unknown_outcome_without_a_known_undo_is_never_clean(world: World) -> None:
    def charge_times_out() -> None:
        raise TimeoutError("gateway timeout")

    report = await _a_then_pay(world, charge_times_out)
    assert not report.clean
    assert [(s.tool, s.outcome) for s in report.steps] == [
        ("pay", Outcome.UNRESOLVED), ("t.a", Outcome.COMPENSATED)]
    assert "reconcile or escalate" in report.unresolved[0].detail


async def test_not_applied_needs_no_undo(world: World) -> None:
    def declined() -> None:
        raise NotApplied("card declined")

    report = await _a_then_pay(world, declined)
    assert report.clean
    assert [s.tool for s in report.steps] == ["t.a"]


async def test_failed_compensation_halts_and_leaves_older_steps_unresolved(world: World) -> None:
    def broken_undo(name: str) -> None:
        raise ConnectionError("refund service down")

    fast = RetryPolicy(max_attempts=2, base_delay=0)
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL(), compensation_retry=fast) as s:
            await s.execute(tool="a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
            await s.execute(tool="b", semantics=C, forward=lambda: world.do("b"),
                            compensate=lambda r: Compensation(fn=broken_undo, kwargs={"name": "b"}))
            await s.execute(tool="c", semantics=C, forward=lambda: world.do("c"), compensate=undo_by(world))
            raise RuntimeError("fail")
    report = info.value.report
    assert report.halted and not report.clean
    assert [(s.tool, s.outcome) for s in report.steps] == [
        ("c", Outcome.COMPENSATED), ("b", Outcome.FAILED), ("a", Outcome.UNRESOLVED)]
    assert report.failed[0].attempts == 2
    assert "halted at step 2" in report.unresolved[0].detail
    assert "undo a-id" not in world.log


async def test_without_halting_the_unwind_continues(world: World) -> None:
    def broken_undo() -> None:
        raise ConnectionError("down")

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL(), halt_on_compensation_failure=False,
                              compensation_retry=RetryPolicy(max_attempts=1)) as s:
            await s.execute(tool="a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
            await s.execute(tool="b", semantics=C, forward=lambda: world.do("b"),
                            compensate=lambda r: Compensation(fn=broken_undo))
            raise RuntimeError("fail")
    report = info.value.report
    assert not report.halted and not report.clean
    assert [s.outcome for s in report.steps] == [Outcome.FAILED, Outcome.COMPENSATED]


async def test_compensation_retries_reuse_one_key(world: World) -> None:
    keys: list[str] = []

    def flaky_refund(charge_id: str, idempotency_key: str) -> None:
        keys.append(idempotency_key)
        if len(keys) < 3:
            raise ConnectionError("try again")

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL(), compensation_retry=RetryPolicy(max_attempts=3, base_delay=0)) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: {"id": "ch_1"},
                            compensate=lambda r: Compensation(fn=flaky_refund, kwargs={"charge_id": r["id"]}))
            raise RuntimeError
    assert len(keys) == 3 and len(set(keys)) == 1
    assert info.value.report.compensated[0].attempts == 3


async def test_irreversible_committed_step_is_orphaned(world: World) -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="email.send", semantics=I, forward=lambda: world.do("mail"))
            raise RuntimeError
    (step,) = info.value.report.orphaned
    assert step.tool == "email.send" and "IRREVERSIBLE" in step.detail
    assert not info.value.report.clean


async def test_reversible_without_undo_is_kept_and_clean() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="search", semantics=R, forward=lambda: ["doc"])
            raise RuntimeError
    assert [s.outcome for s in info.value.report.steps] == [Outcome.KEPT]
    assert info.value.report.clean


async def test_reversible_with_an_in_process_undo_runs_it() -> None:
    cart: list[str] = []

    def add() -> str:
        cart.append("x")
        return "x"

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="cart.add", semantics=R, forward=add,
                            compensate=lambda r: Compensation(fn=lambda value: cart.remove(value),
                                                              kwargs={"value": r}))
            raise RuntimeError
    assert cart == [] and info.value.report.clean


async def test_fallback_completed_step_is_compensated(world: World) -> None:
    def primary() -> None:
        raise NotApplied("primary provider rejected the request")

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            out = await s.execute(tool="ship", semantics=C, forward=primary,
                                  fallback_action=lambda: world.do("backup"), compensate=undo_by(world))
            assert out == {"id": "backup-id"}
            raise RuntimeError("later failure")
    report = info.value.report
    assert world.log == ["do backup", "undo backup-id"]
    (step,) = report.steps
    assert step.via_fallback and step.outcome is Outcome.COMPENSATED
    assert report.clean


async def test_fallback_after_an_unknown_primary_keeps_both_on_the_stack(world: World) -> None:
    def primary() -> None:
        raise TimeoutError("may have landed")

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="ship", semantics=C, forward=primary,
                            fallback_action=lambda: world.do("backup"), compensate=undo_by(world))
            raise RuntimeError
    report = info.value.report
    assert [(s.step, s.via_fallback, s.outcome) for s in report.steps] == [
        (2, True, Outcome.COMPENSATED), (1, False, Outcome.UNRESOLVED)]
    assert not report.clean  # the primary may have landed: never clean over it


async def test_retry_policy_retries_then_succeeds() -> None:
    attempts: list[str] = []

    def flaky(idempotency_key: str) -> str:
        attempts.append(idempotency_key)
        if len(attempts) < 3:
            raise ConnectionError
        return "ok"

    async with saga_scope(MemoryWAL()) as s:
        out = await s.execute(tool="t", semantics=R, forward=flaky,
                              retry=RetryPolicy(max_attempts=3, base_delay=0))
    assert out == "ok" and len(attempts) == 3 and len(set(attempts)) == 1


async def test_retry_policy_exclusions_are_respected() -> None:
    calls = 0

    def bad() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not worth retrying")

    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="t", semantics=R, forward=bad,
                            retry=RetryPolicy(max_attempts=5, base_delay=0, give_up_on=(ValueError,)))
    assert calls == 1


@pytest.mark.slow  # real attempts of 0.35 s each: the core env runs it, not the fast lane
async def test_timeout_applies_to_each_attempt_not_the_whole_loop() -> None:
    # Three attempts of 0.35 s each under a 1 s timeout: a loop-wide timeout would cut the
    # third attempt off (1.05 s in); a per-attempt one lets every attempt finish, with 0.65 s
    # to spare for a loaded machine that runs the process late (0.05 s was not enough).
    attempts = 0

    async def slowish() -> str:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0.35)
        if attempts < 3:
            raise ConnectionError
        return "done"

    async with saga_scope(MemoryWAL()) as s:
        out = await s.execute(tool="t", semantics=R, forward=slowish, timeout=1.0,
                              retry=RetryPolicy(max_attempts=3, base_delay=0))
    assert out == "done" and attempts == 3


async def test_a_plain_async_tool_is_called_bare_only_when_nothing_is_passed_to_it() -> None:
    # A plain async tool is its own op (no Call made: engine/invoke.call_op) only when it is called
    # with nothing: one that names idempotency_key still gets its step's key, in either face.
    keys: list[str | None] = []

    async def bare() -> str:
        return "bare"

    async def keyed(idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "keyed"

    async with saga_scope(MemoryWAL()) as s:
        assert await s.execute(tool="t.bare", semantics=R, forward=bare) == "bare"
        assert await s.execute(tool="t.keyed", semantics=R, forward=keyed) == "keyed"
        assert await asyncio.to_thread(lambda: s.execute_sync(tool="t.keyed", semantics=R, forward=keyed)) == "keyed"
        expected = [operation_id(s.saga_id, index, "t.keyed", "forward") for index in (2, 3)]
    assert keys == expected


async def test_an_attempt_that_times_out_leaves_the_step_unknown() -> None:
    async def hangs() -> None:
        await asyncio.sleep(10)

    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="slow", semantics=C, forward=hangs, timeout=0.05,
                            compensate=lambda r: Compensation(fn=print))
    (step,) = info.value.report.steps
    assert step.state is StepState.UNKNOWN
    assert isinstance(info.value.cause, TimeoutError)


@pytest.mark.slow  # real attempts of 0.35 s each: the core env runs it, not the fast lane
def test_sync_timeout_applies_per_attempt() -> None:
    # As above: 3 x 0.35 s overruns a loop-wide 1 s; each attempt has 0.65 s to spare.
    attempts = 0

    def slowish() -> str:
        nonlocal attempts
        attempts += 1
        time.sleep(0.35)
        if attempts < 3:
            raise ConnectionError
        return "done"

    with saga_scope(MemoryWAL()) as s:
        out = s.execute(tool="t", semantics=R, forward=slowish, timeout=1.0,
                        retry=RetryPolicy(max_attempts=3, base_delay=0))
    assert out == "done" and attempts == 3


def test_sync_timeout_marks_unknown() -> None:
    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="slow", semantics=R, forward=lambda: time.sleep(2), timeout=0.05)
    assert info.value.report.steps[0].state is StepState.UNKNOWN


def test_sync_saga_runs_async_tools_and_undos(world: World) -> None:
    async def adoit() -> dict[str, str]:
        await asyncio.sleep(0)
        return world.do("async")

    async def aundo(name: str) -> None:
        await asyncio.sleep(0)
        world.undo(name)

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="a", semantics=C, forward=adoit,
                  compensate=lambda r: Compensation(fn=aundo, kwargs={"name": r["id"]}))
        raise RuntimeError
    assert world.log == ["do async", "undo async-id"] and info.value.report.clean


async def test_async_saga_runs_sync_tools_off_the_loop(world: World) -> None:
    threads: list[str] = []

    def blocking() -> dict[str, str]:
        threads.append(threading.current_thread().name)
        assert current_saga() is not None  # the context travels to the worker thread
        return world.do("sync")

    async with saga_scope(MemoryWAL()) as s:
        await s.execute(tool="a", semantics=R, forward=blocking)
        await s.execute(tool="b", semantics=R, forward=blocking, inline=True)
    assert threads[0] != threading.current_thread().name
    assert threads[1] == threading.current_thread().name


async def test_sync_face_inside_a_running_loop_can_await_coroutines() -> None:
    async def coro_tool() -> int:
        return 7

    saga = Saga(MemoryWAL())
    saga.start()
    assert saga.execute_sync(tool="t", semantics=R, forward=coro_tool) == 7


async def test_lambda_returning_a_coroutine_is_awaited() -> None:
    async def create() -> str:
        return "ns"

    async with saga_scope(MemoryWAL()) as s:
        assert await s.execute(tool="t", semantics=R, forward=lambda: create()) == "ns"


async def test_hundred_concurrent_sagas_never_see_each_others_steps() -> None:
    wal = MemoryWAL()

    async def one(n: int) -> tuple[str, list[str]]:
        async with saga_scope(wal, name=f"s{n}") as s:
            for i in range(3):
                await s.execute(tool=f"saga{n}.step{i}", semantics=R,
                                forward=lambda: asyncio.sleep(0))
                assert current_saga() is s
            return s.saga_id, [st.tool for st in s.steps]

    results = await asyncio.gather(*(one(n) for n in range(100)))
    assert len({sid for sid, _ in results}) == 100
    for n, (_, tools) in enumerate(results):
        assert tools == [f"saga{n}.step{i}" for i in range(3)]
    by_saga: dict[str, set[str]] = {}
    for rec in wal.records():
        if rec["type"] == "STEP_COMMITTED":
            by_saga.setdefault(rec["saga"], set()).add(rec["body"]["tool"].split(".")[0])
    assert all(len(prefixes) == 1 for prefixes in by_saga.values())


def test_one_saga_used_from_many_threads_numbers_steps_uniquely() -> None:
    with saga_scope(MemoryWAL()) as s:
        def work(n: int) -> None:
            for i in range(20):
                s.execute(tool=f"t{n}.{i}", semantics=R, forward=lambda: None)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert sorted(st.index for st in s.steps) == list(range(1, 161))


async def test_a_finished_saga_refuses_new_steps() -> None:
    async with saga_scope(MemoryWAL()) as s:
        pass
    with pytest.raises(SagaClosed, match="start a new saga_scope"):
        await s.execute(tool="late", semantics=R, forward=lambda: None)


def test_a_saga_never_started_refuses_steps() -> None:
    saga = Saga(MemoryWAL())
    with pytest.raises(SagaClosed, match="never started"):
        saga.execute_sync(tool="t", semantics=R, forward=lambda: None)


def test_a_scope_is_entered_once() -> None:
    scope = saga_scope(MemoryWAL())
    with scope:
        pass
    with pytest.raises(RuntimeError, match="only once"), scope:
        pass


async def test_cancellation_unwinds_then_propagates(world: World) -> None:
    started = asyncio.Event()

    async def body() -> None:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="a", semantics=C, forward=lambda: world.do("a"), compensate=undo_by(world))
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(body())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.log == ["do a", "undo a-id"]


# -- bad input: each error names the problem and the fix ----------------------------------


async def test_unknown_semantics_is_refused_before_anything_runs() -> None:
    ran = []
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="t", semantics="REVERSABLE", forward=lambda: ran.append(1))
    assert "unknown semantics 'REVERSABLE'" in str(info.value.cause) and ran == []


async def test_irreversible_with_compensate_is_refused() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="wire", semantics=I, forward=lambda: None,
                            compensate=lambda r: Compensation(fn=print))
    assert isinstance(info.value.cause, CompensationError)
    assert "COMPENSABLE" in str(info.value.cause)


async def test_compensable_without_any_undo_is_refused() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="t", semantics=C, forward=lambda: None)
    assert "@inverse_of" in str(info.value.cause)


async def test_factory_returning_the_wrong_type_is_named_and_the_effect_orphaned() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: {"id": 1},
                            compensate=lambda r: f"refund {r['id']}")
    assert "must return a Compensation" in str(info.value.cause) and "str" in str(info.value.cause)
    (step,) = info.value.report.orphaned
    assert "must return a Compensation" in step.detail
    assert not info.value.report.clean


async def test_factory_that_crashes_on_the_result_is_reported() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: {"x": 1},
                            compensate=lambda r: Compensation(fn=print, kwargs={"id": r["id"]}))
    assert "raised KeyError" in str(info.value.cause)


async def test_compensable_factory_returning_none_is_refused() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: 1, compensate=lambda r: None)
    assert "returned None" in str(info.value.cause)


async def test_non_json_kwargs_on_a_handler_backed_undo_are_refused(world: World) -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: object(),
                            compensate=lambda r: Compensation(fn=world.undo, handler="eng.undo",
                                                              kwargs={"name": r}))
    assert "JSON round trip" in str(info.value.cause)


async def test_fn_and_handler_that_disagree_are_refused(world: World) -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="pay", semantics=C, forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=print, handler="eng.undo"))
    assert "would run a different function" in str(info.value.cause)


async def test_dict_compensations_must_name_a_registered_handler(world: World) -> None:
    for bad, message in (({"kwargs": {}}, "without a 'handler'"),
                         ({"handler": "eng.nope"}, "no compensation handler named 'eng.nope'"),
                         ({"handler": "eng.undo", "extra": 1}, "unknown keys")):
        with pytest.raises(SagaAborted) as info:
            async with saga_scope(MemoryWAL()) as s:
                await s.execute(tool="pay", semantics=C, forward=lambda: 1, compensate=lambda r, b=bad: b)
        assert message in str(info.value.cause)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tool": ""}, "non-empty name"),
    ({"forward": 3}, "must be callable"),
    ({"compensate": 42}, "must be a factory"),
])
async def test_malformed_step_arguments(kwargs: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"tool": "t", "semantics": C, "forward": lambda: 1,
                            "compensate": lambda r: Compensation(fn=print)}
    call.update(kwargs)
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(**call)
    assert message in str(info.value.cause)


def test_retry_policy_validates() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(backoff="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        RetryPolicy(base_delay=-1)


def test_retry_delays() -> None:
    assert [RetryPolicy(backoff="exponential", base_delay=1, max_delay=5).delay(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert [RetryPolicy(backoff="linear", base_delay=1).delay(n) for n in (1, 2, 3)] == [1, 2, 3]
    assert RetryPolicy(backoff="constant", base_delay=0.5).delay(9) == 0.5
