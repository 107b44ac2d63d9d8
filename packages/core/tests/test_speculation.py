"""Predictive pre-execution (issue 30 part 2): REVERSIBLE calls run ahead, held behind HMAC leases.

What a wrong implementation gets wrong, and what each test pins:
* a redeemed call must not call the tool again, and the log names the lease under that step;
* a lease that is stale, forged, altered, or presented for another intent, saga, tool or
  arguments is never redeemed (property tests, on the signer and end to end);
* only REVERSIBLE steps are speculated (the gate says so too), and a halted switch stops it;
* a wasted speculation is undone when its tool declares an undo, and otherwise left alone.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

import agent_saga
from agent_saga import (
    AgentKit,
    BreakerPolicy,
    CircuitBreaker,
    Compensation,
    KillSwitch,
    MemoryWAL,
    PatternPredictor,
    PreFlightGate,
    SagaAborted,
    Speculator,
    StepRefused,
    TierAnswer,
    ToolCall,
    cascade,
    compensator,
    inverse_of,
    planned_calls,
    saga_scope,
    set_breaker,
    tool,
    tools_must_exist,
)
from agent_saga.gate import Action, DefaultGate, FileSwitchStore, Rule, StepRequest, tool_is
from agent_saga.runtime import Prediction, SpeculationLease, user_value
from agent_saga.runtime._speculation_leases import LeaseSigner, args_digest
from agent_saga.semantics import ActionSemantics


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A REVERSIBLE read that counts every real call, by page."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.lock = threading.Lock()

        @tool(semantics="REVERSIBLE")
        def read(page: int) -> str:
            with self.lock:
                self.calls.append(page)
            return f"page {page}"

        self.read = read


def _records(wal: MemoryWAL, rtype: str) -> list[dict[str, Any]]:
    return [dict(r) for r in wal.records() if r["type"] == rtype]


def _gate(tmp_path: Any) -> tuple[PreFlightGate, KillSwitch]:
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0)
    return PreFlightGate(switch=switch), switch


# -- redeeming ------------------------------------------------------------------------


def test_a_predicted_read_is_redeemed_not_called_again_and_the_log_names_its_lease(tmp_path: Any) -> None:
    reads, wal = Reads(), MemoryWAL()
    gate, _ = _gate(tmp_path)
    with saga_scope(wal=wal, gate=gate), Speculator([reads.read], intent="r1", predictor=PatternPredictor()) as spec:
        assert [reads.read(p) for p in (1, 2, 3, 4)] == ["page 1", "page 2", "page 3", "page 4"]
        stats = dataclasses.replace(spec.stats)
    # pages 3 and 4 ran once each, ahead of the agent; page 5 was guessed, then dropped at
    # close (cancelled if it had not started yet, so it ran at most once)
    assert sorted(c for c in reads.calls if c != 5) == [1, 2, 3, 4] and reads.calls.count(5) <= 1
    assert stats.started == 3 and stats.redeemed == 2
    redeemed = _records(wal, "SPECULATION_REDEEMED")
    assert [r["step"] for r in redeemed] == [3, 4]
    assert all(r["body"]["tool"] == "read" and r["body"]["intent"] == "r1" for r in redeemed)
    assert len({r["body"]["lease"] for r in redeemed}) == 2
    # the redeemed step is an ordinary committed step, with the held result as its result
    committed = {r["step"]: r["body"] for r in _records(wal, "STEP_COMMITTED")}
    assert committed[3]["result"] == "page 3" and committed[4]["args"] == {"page": 4}
    assert spec.stats.wasted == 1 and spec.stats.reasons == {"never asked for": 1}


async def test_planned_calls_from_an_adapter_are_redeemed_through_the_kit() -> None:
    """The adapters' hook: the parallel calls of one model response run ahead at once."""
    seen: list[int] = []

    async def fetch(order: int) -> dict[str, int]:
        seen.append(order)
        return {"order": order}

    kit = AgentKit("speculate", wal=MemoryWAL())
    fetch_tool = kit.safe_tool(fetch, semantics="REVERSIBLE")
    assert planned_calls([("fetch", {"order": 1})]) == []  # outside a saga: nothing happens
    async with kit.transaction(), Speculator([fetch_tool], intent="turn-1") as spec:
        leases = planned_calls([("fetch", {"order": 7}), Prediction("fetch", {"order": 8})])
        assert [lease.tool for lease in leases] == ["fetch", "fetch"]
        assert await fetch_tool(order=7) == {"order": 7}
        assert await fetch_tool(order=8) == {"order": 8}
        assert await fetch_tool(order=9) == {"order": 9}  # not planned: runs for real
    assert sorted(seen) == [7, 8, 9]
    assert spec.stats.redeemed == 2 and spec.stats.wasted == 0
    wal = kit.wal
    assert isinstance(wal, MemoryWAL)
    assert [r["step"] for r in _records(wal, "SPECULATION_REDEEMED")] == [1, 2]


async def test_the_tool_calls_of_a_verified_cascade_answer_run_ahead() -> None:
    """Wired where the runtime knows a response's planned calls: cascade's verified answer."""
    seen: list[int] = []

    async def fetch(order: int) -> int:
        seen.append(order)
        return order

    class OneTier:
        name = "small"

        async def complete(self, request: Any, feedback: str | None = None) -> TierAnswer:
            calls = (ToolCall("fetch", {"order": 1}), ToolCall("fetch", {"order": 2}),
                     ToolCall("fetch", {}, raw_arguments="{not json"))
            return TierAnswer("", calls, tokens=10)

    kit = AgentKit("speculate", wal=MemoryWAL())
    fetch_tool = kit.safe_tool(fetch, semantics="REVERSIBLE")
    async with kit.transaction(), Speculator([fetch_tool], intent="turn-1") as spec:
        result = await cascade("orders 1 and 2", ladder=[OneTier()], verify=tools_must_exist(["fetch"]))
        assert spec.stats.started == 2  # the unparsable call is not guessed
        for call in result.answer.tool_calls[:2]:
            await fetch_tool(**call.arguments)
    assert sorted(seen) == [1, 2] and spec.stats.redeemed == 2


def test_a_redeemed_call_keeps_its_inverse_of_pairing() -> None:
    """Seen before: redeeming replaced the step's forward, the engine no longer found the
    @inverse_of pairing through it, and a rollback left the cursor the redeemed call opened
    standing (its commit record had no undo)."""
    closed: list[str] = []

    def open_cursor(query: str) -> dict[str, str]:
        return {"handle": f"cursor:{query}"}

    @inverse_of(open_cursor, maps={"handle": "handle"})
    @compensator("test_speculation.close_cursor")
    def close_cursor(handle: str) -> None:
        closed.append(handle)

    opened = tool(semantics="REVERSIBLE")(open_cursor)
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal=MemoryWAL(), gate=None), Speculator(
        [opened], intent="r1"
    ) as spec:
        lease = spec.speculate("open_cursor", {"query": "q"})
        assert lease is not None
        spec._held[lease.lease_id].future.result()
        assert opened("q") == {"handle": "cursor:q"}
        assert spec.stats.redeemed == 1
        raise LookupError("roll back")
    assert isinstance(aborted.value.__cause__, LookupError), aborted.value.__cause__  # not a failed assert
    assert closed == ["cursor:q"]


# -- what may never be redeemed -----------------------------------------------------------

_FIELDS = ("lease_id", "intent", "saga_id", "tool", "args_digest", "expires", "tag")
_text = st.text(min_size=1, max_size=12)


@settings(max_examples=examples(300), deadline=None)
@given(
    intent=_text, saga=_text, tool_name=_text, args=st.dictionaries(_text, st.integers() | _text, max_size=3),
    ttl=st.floats(0.001, 1e6), elapsed=st.floats(0, 2e6),
    field=st.sampled_from((None, *_FIELDS)), value=st.text(max_size=70) | st.floats(allow_nan=False),
    ask=st.fixed_dictionaries({
        "intent": st.none() | _text, "saga": st.none() | _text, "tool": st.none() | _text,
        "args": st.none() | st.dictionaries(_text, st.integers(), max_size=2),
    }),
)
def test_a_lease_is_redeemable_only_unaltered_in_time_by_its_own_intent_saga_tool_and_arguments(
    intent: str, saga: str, tool_name: str, args: dict[str, Any], ttl: float, elapsed: float,
    field: str | None, value: Any, ask: dict[str, Any],
) -> None:
    clock = Clock()
    signer = LeaseSigner(clock=clock)
    digest = args_digest(args)
    assert digest is not None
    # In time: before the clock reads issue time + ttl. Not `elapsed < ttl`: on the clock (at 1000)
    # a ttl of next_up(0.001) and an elapsed 0.001 (both draws Hypothesis makes) are the same instant.
    expires_at = clock.now + ttl
    lease = signer.issue(intent=intent, saga_id=saga, tool=tool_name, digest=digest, ttl=ttl)
    presented = lease
    if field is not None:
        presented = dataclasses.replace(lease, **{field: value})
    clock.now += elapsed
    call = {k: (v if v is not None else {"intent": intent, "saga": saga, "tool": tool_name, "args": args}[k])
            for k, v in ask.items()}
    refusal = signer.refusal(presented, intent=call["intent"], saga_id=call["saga"], tool=call["tool"],
                             digest=args_digest(call["args"]))
    honest = (
        presented == lease and clock.now < expires_at and call["intent"] == intent and call["saga"] == saga
        and call["tool"] == tool_name and args_digest(call["args"]) == digest
    )
    assert (refusal is None) == honest, (refusal, presented, call)
    # a lease signed under another key (a forger's) is never good here, whatever it binds
    forged = LeaseSigner(clock=clock).issue(intent=intent, saga_id=saga, tool=tool_name, digest=digest, ttl=ttl + elapsed + 1)
    assert signer.refusal(forged, intent=intent, saga_id=saga, tool=tool_name, digest=digest) is not None


_ATTACKS = ("none", "stale", "forged", "altered", "cross_intent", "cross_saga", "other_args", "other_tool")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attack=st.sampled_from(_ATTACKS), field=st.sampled_from(_FIELDS[:-1]), page=st.integers(-5, 50))
def test_end_to_end_only_the_untouched_lease_for_this_very_call_is_redeemed(
    attack: str, field: str, page: int
) -> None:
    reads, wal, clock = Reads(), MemoryWAL(), Clock()

    @tool(semantics="REVERSIBLE")
    def other(page: int) -> str:
        return f"other {page}"

    with saga_scope(wal=wal, gate=None) as first:
        spec = Speculator([reads.read, other], intent="r1", ttl=5, clock=clock).attach()
        lease = spec.speculate("read", {"page": page})
        assert lease is not None
        spec._held[lease.lease_id].future.result()  # the guess has run
        called = 1
        if attack == "stale":
            clock.now += 5
        elif attack in ("forged", "altered"):
            held = spec._held[lease.lease_id]
            if attack == "forged":
                held.lease = LeaseSigner(clock=clock).issue(
                    intent="r1", saga_id=first.saga_id, tool="read", digest=lease.args_digest, ttl=5)
            else:
                held.lease = dataclasses.replace(lease, **{field: "x" if field != "expires" else lease.expires + 1})
        elif attack == "cross_intent":
            spec.set_intent("r2")
        if attack == "cross_saga":
            # the speculator (wrongly) moved to another saga with its held result
            first.saga.speculation = None
            with saga_scope(wal=wal, gate=None) as second:
                spec._saga = second.saga
                second.saga.speculation = spec
                assert reads.read(page) == f"page {page}"
                called += 1
        elif attack == "other_args":
            assert reads.read(page + 1) == f"page {page + 1}"
            called += 1
        elif attack == "other_tool":
            assert other(page) == f"other {page}"
        else:
            assert reads.read(page) == f"page {page}"
            called += 1
        redeemed = spec.stats.redeemed
        spec.close()
    expected = 1 if attack == "none" else 0
    assert redeemed == expected
    assert len(_records(wal, "SPECULATION_REDEEMED")) == expected
    # redeemed: the tool ran once for the guess and not again; otherwise every call ran for real
    assert len(reads.calls) == (called - expected)


# -- what may never be speculated ---------------------------------------------------------


def _request(semantics: ActionSemantics, tool_name: str = "t") -> StepRequest:
    return StepRequest("s1", 0, tool_name, semantics, {})


@pytest.mark.parametrize("semantics", [ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE])
def test_the_gate_refuses_to_speculate_a_step_that_is_not_reversible(tmp_path: Any, semantics: ActionSemantics) -> None:
    gate, _ = _gate(tmp_path)
    for each in (gate, DefaultGate(gate.switch)):
        with pytest.raises(StepRefused) as refused:
            each.check_speculation(_request(semantics))
        assert refused.value.rule == "speculation" and "only a REVERSIBLE step" in refused.value.reason
        each.check_speculation(_request(ActionSemantics.REVERSIBLE))  # the same gate lets a read run ahead


def test_a_speculator_never_runs_a_compensable_tool_ahead(tmp_path: Any) -> None:
    ran: list[int] = []

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=lambda: None))
    def reserve(seat: int) -> int:
        ran.append(seat)
        return seat

    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([reserve], intent="r1") as spec:
        assert spec.speculate("reserve", {"seat": 4}) is None
        assert planned_calls([("reserve", {"seat": 5})]) == []
    assert ran == [] and spec.stats.refused == 2


def test_a_halted_switch_stops_speculation_and_the_redemption(tmp_path: Any) -> None:
    reads, wal = Reads(), MemoryWAL()
    gate, switch = _gate(tmp_path)
    with saga_scope(wal=wal, gate=gate), Speculator([reads.read], intent="r1") as spec:
        lease = spec.speculate("read", {"page": 1})
        assert lease is not None
        spec._held[lease.lease_id].future.result()
        switch.halt("global", reason="incident", by="ops")
        assert spec.speculate("read", {"page": 2}) is None  # nothing new runs ahead
        with pytest.raises(StepRefused):
            reads.read(1)  # and the held result is not handed out past the halt
        switch.resume("global", by="ops")
    assert reads.calls == [1]
    assert spec.stats.redeemed == 0 and spec.stats.refused == 1
    assert _records(wal, "SPECULATION_REDEEMED") == []


def test_an_open_or_half_open_breaker_is_not_speculated_against(tmp_path: Any) -> None:
    clock = Clock()
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None, cool_down=10), clock=clock)
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0)
    request = _request(ActionSemantics.REVERSIBLE, "read")
    breaker.before(request)
    breaker.observe(request, ConnectionError("down"))  # one failure trips it
    for gate in (PreFlightGate(switch=switch, breaker=breaker), DefaultGate(switch)):
        set_breaker(breaker)
        try:
            with pytest.raises(StepRefused, match="circuit open"):
                gate.check_speculation(request)
            clock.now += 11  # cooled down: half open, and the trial call is the agent's, not a guess
            with pytest.raises(StepRefused, match="half open"):
                gate.check_speculation(request)
            breaker.before(request)  # the trial was handed back: the agent's call still gets it
            breaker.observe(request, ConnectionError("still down"))
        finally:
            set_breaker(None)


def test_a_halted_switch_refuses_speculation_in_the_default_gate_too(tmp_path: Any) -> None:
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0)
    switch.halt("global", reason="incident", by="ops")
    with pytest.raises(StepRefused):
        DefaultGate(switch).check_speculation(_request(ActionSemantics.REVERSIBLE))


def test_a_rule_that_blocks_or_asks_a_person_is_not_speculated_around(tmp_path: Any) -> None:
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0)
    for then in (Action.BLOCK, Action.APPROVE):
        gate = PreFlightGate([Rule("no-read", tool_is("read"), then=then)], switch=switch)
        with pytest.raises(StepRefused):
            gate.check_speculation(_request(ActionSemantics.REVERSIBLE, "read"))


def test_a_custom_gate_without_check_speculation_speculates_nothing() -> None:
    class OnlyChecks:
        def admit(self, saga: Any) -> None: ...
        def check(self, request: StepRequest) -> None: ...
        async def check_async(self, request: StepRequest) -> None: ...
        def observe(self, request: StepRequest, error: BaseException | None) -> None: ...

    reads = Reads()
    with saga_scope(wal=MemoryWAL(), gate=OnlyChecks()), Speculator([reads.read], intent="r1") as spec:
        assert spec.speculate("read", {"page": 1}) is None
    assert reads.calls == [] and "no check_speculation" in next(iter(spec.stats.reasons))


# -- wasted speculations ----------------------------------------------------------------


def test_a_wasted_speculation_is_undone_when_its_tool_declares_an_undo() -> None:
    undone: list[str] = []
    opened: list[str] = []

    @tool(semantics="REVERSIBLE", compensate=lambda handle: Compensation(fn=lambda: undone.append(handle)))
    def open_cursor(query: str) -> str:
        opened.append(query)
        return f"cursor:{query}"

    reads = Reads()
    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([open_cursor, reads.read], intent="r1") as spec:
        assert spec.speculate("open_cursor", {"query": "q"}) is not None
        assert spec.speculate("read", {"page": 9}) is not None  # no undo declared: left as it is
    assert opened == ["q"] and undone == ["cursor:q"]
    assert spec.stats.wasted == 2 and spec.stats.undone == 1 and spec.stats.undo_failed == 0


def test_a_guess_that_hangs_does_not_hold_the_sagas_end() -> None:
    started, release = threading.Event(), threading.Event()

    @tool(semantics="REVERSIBLE")
    def slow(key: str) -> str:
        started.set()
        release.wait(30)
        return key

    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([slow], intent="r1", close_wait=0.05) as spec:
        assert spec.speculate("slow", {"key": "k"}) is not None
        assert started.wait(30)  # running, so it cannot be cancelled
    # closed with the guess still running: counted, not waited for
    assert spec.stats.reasons == {"never asked for": 1, "still running at close": 1}
    release.set()


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_guess_that_failed_is_not_redeemed_the_agents_call_runs_for_real(face: str) -> None:
    """The agent's call gets plain values: seen before, the fallback called the front door's
    partial as built, so a tagged argument reached the tool still tagged."""
    attempts: list[str] = []

    def flaky(key: str) -> str:
        attempts.append(key)
        if len(attempts) == 1:
            raise ConnectionError("the guess hit a blip")
        return key

    async def flaky_async(key: str) -> str:
        return flaky(key)

    wal = MemoryWAL()
    kit = AgentKit("speculate", wal=wal)
    fetch = kit.safe_tool(flaky if face == "sync" else flaky_async, name="fetch", semantics="REVERSIBLE")
    async with kit.transaction(), Speculator([fetch], intent="r1") as spec:
        assert spec.speculate("fetch", {"key": "k"}) is not None
        assert await fetch(key=user_value("k", "request-1")) == "k"
    assert attempts == ["k", "k"] and spec.stats.redeemed == 0
    assert spec.stats.reasons == {"the guess failed": 1}
    assert _records(wal, "SPECULATION_REDEEMED") == []
    assert [r["body"]["result"] for r in _records(wal, "STEP_COMMITTED")] == ["k"]


def test_changing_the_intent_drops_what_was_guessed_for_the_old_one() -> None:
    reads = Reads()
    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([reads.read], intent="r1") as spec:
        spec.speculate("read", {"page": 1})
        spec.set_intent("r2")
        assert reads.read(1) == "page 1"
        assert spec.stats.redeemed == 0 and spec.stats.reasons == {"the intent changed": 1}


# -- the shipped predictor ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([{"page": 1}, {"page": 2}], [{"page": 3}]),
        ([{"path": "part-07.txt", "n": 1}, {"path": "part-08.txt", "n": 1}], [{"path": "part-09.txt", "n": 1}]),
        ([{"offset": 100}, {"offset": 50}], [{"offset": 0}]),
        ([{"page": 1}, {"page": 1}], []),  # no progression
        ([{"page": 1, "q": "a"}, {"page": 2, "q": "b"}], []),  # two arguments moved: not one pattern
        ([{"page": True}, {"page": False}], []),  # a bool is not a number here
        ([{"page": 1}], []),  # one call is no pattern
    ],
)
def test_pattern_predictor(calls: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    predictor = PatternPredictor()
    for args in calls:
        predictor.observe("read", args)
    assert [p.args for p in predictor.predict()] == expected
    assert all(p.tool == "read" for p in predictor.predict())


def test_a_predictor_that_fails_never_fails_the_agents_call() -> None:
    class Broken:
        def observe(self, tool: str, args: Any) -> None: ...

        def predict(self) -> list[Prediction]:
            raise RuntimeError("model of the agent crashed")

    reads = Reads()
    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([reads.read], intent="r1", predictor=Broken()) as spec:
        assert reads.read(1) == "page 1"
    assert spec.stats.reasons == {"the predictor failed: RuntimeError": 1}


def test_bad_configuration_is_one_clear_line() -> None:
    reads = Reads()
    with pytest.raises(agent_saga.ConfigurationError, match="intent="):
        Speculator([reads.read], intent="")
    with pytest.raises(agent_saga.ConfigurationError, match="made steps by @tool"):
        Speculator([lambda: None], intent="r1")
    with pytest.raises(agent_saga.ConfigurationError, match="inside a saga"):
        Speculator([reads.read], intent="r1").attach()
    with saga_scope(wal=MemoryWAL(), gate=None), Speculator([reads.read], intent="r1") as spec:
        with saga_scope(wal=MemoryWAL(), gate=None) as other, pytest.raises(
            agent_saga.ConfigurationError, match="make one per saga"
        ):
            spec.attach(other)
    assert isinstance(SpeculationLease, type)
