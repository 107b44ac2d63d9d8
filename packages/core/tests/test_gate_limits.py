"""Spend and rate limits, rules and approvals: the pre-flight gate's policy half."""

from __future__ import annotations

from typing import Any

import pytest
from gate_support import Approver, Clock, req
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    ActionSemantics,
    BudgetLimit,
    Compensation,
    ConfigurationError,
    MemoryWAL,
    PreFlightGate,
    RateLimit,
    SagaAborted,
    StepRefused,
    by_arg,
    by_tool,
    combine,
    saga_scope,
)
from agent_saga.gate import (
    ApprovalDecision,
    MemoryLimitStore,
    Rule,
    arg_exceeds,
    semantics_is,
    set_limit_store,
    tool_is,
)
from agent_saga.gate._stores import Charge

C = ActionSemantics.COMPENSABLE


pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


def charge_in_saga(gate: PreFlightGate, wal: MemoryWAL | None = None, tool: str = "stripe.charge",
                   **args: Any) -> bool:
    """One charge in its own saga through the real engine; True if it ran."""
    ran: list[int] = []
    causes: list[BaseException] = []

    def forward() -> dict[str, str]:
        ran.append(1)
        return {"id": "ch_1"}

    try:
        with saga_scope(wal or MemoryWAL(), gate=gate) as s:
            s.execute(tool=tool, semantics=C, forward=forward,
                      compensate=lambda r: Compensation(fn=lambda: None), args=args)
    except SagaAborted as err:
        causes.append(err.cause)
    if causes:
        assert isinstance(causes[0], StepRefused), causes[0]
        assert not ran  # a refused step never reached its tool
        return False
    return True


# -- the seed's snippet --------------------------------------------------------------------


def test_seed_limit_snippet_runs_and_stops_the_51st_charge_of_999() -> None:
    clock = Clock()
    set_limit_store(MemoryLimitStore(clock=clock))
    gate = PreFlightGate(limits=[
        BudgetLimit("daily-spend", arg="amount", max_total=50_000, window=86_400),
        BudgetLimit("per-customer", arg="amount", max_total=1_000, window=86_400,
                    scope=by_arg("customer_id")),
        RateLimit("velocity", max_calls=20, window=60, scope=by_tool),
        BudgetLimit("wire-ceiling", arg="amount", max_total=250_000, window=86_400,
                    escalate_to_human=True),
    ])
    # A per-call threshold passes every one of these; the window does not.
    assert not arg_exceeds("amount", 1000)(req(amount=999))

    wal = MemoryWAL()
    outcomes = []
    for i in range(60):
        clock.advance(3.1)  # 20 calls in any 60 s at most: velocity never bites
        outcomes.append(charge_in_saga(gate, wal, amount=999, customer_id=f"cus_{i}"))
    assert outcomes == [True] * 50 + [False] * 10
    refused = [r for r in wal.records() if r["type"] == "STEP_REFUSED"]
    assert {r["body"]["rule"] for r in refused} == {"limit:daily-spend"}
    assert "49950 used of 50000" in refused[0]["body"]["reason"]

    # The per-customer cap and the velocity limit of the same snippet, a day later.
    clock.advance(86_400)
    assert charge_in_saga(gate, amount=999, customer_id="cus_a")
    assert not charge_in_saga(gate, amount=2, customer_id="cus_a")  # 1,001 for one customer
    allowed = [charge_in_saga(gate, amount=1, customer_id=f"v{i}") for i in range(25)]
    assert allowed == [True] * 19 + [False] * 6  # 20 calls a minute, the refused one not counted


# -- all-or-nothing, refunds, permanence ----------------------------------------------------


def two_limits(**gate_kwargs: Any) -> PreFlightGate:
    return PreFlightGate(limits=[
        BudgetLimit("total", arg="amount", max_total=100, window=3600),
        BudgetLimit("per-customer", arg="amount", max_total=10, window=3600, scope=by_arg("customer_id")),
    ], store=MemoryLimitStore(), **gate_kwargs)


def test_a_refusal_by_a_later_limit_leaves_earlier_limits_undebited() -> None:
    gate = two_limits()
    gate.check(req(amount=8, customer_id="c1"))
    with pytest.raises(StepRefused) as info:
        gate.check(req(amount=5, customer_id="c1"))  # per-customer: 13 > 10
    assert info.value.rule == "limit:per-customer"
    assert_total(gate, "total", 8.0)  # not 13: the refused call took nothing from "total"
    gate.check(req(amount=2, customer_id="c1"))  # and c1's own window still holds only 8


def assert_total(gate: PreFlightGate, name: str, expected: float) -> None:
    """Read a window's total: a charge nothing can fit is refused and reports the total, debiting nothing."""
    limit = next(lim for lim in gate.limits if lim.name == name)
    probe = gate.store.debit([Charge(f"{name}:*", limit.max_total, limit.window, 1e18)])
    assert probe.refused == 0
    assert probe.total == pytest.approx(expected)


def test_a_rule_refusal_after_the_limits_hands_the_budget_back() -> None:
    gate = PreFlightGate(
        [Rule("no-wires", tool_is("wire.*"), "block", "wires are off today")],
        limits=[BudgetLimit("total", arg="amount", max_total=100, window=3600)],
        store=MemoryLimitStore(),
    )
    for _ in range(5):
        with pytest.raises(StepRefused) as info:
            gate.check(req("wire.send", amount=60))
        assert info.value.rule == "no-wires"
        assert "wires are off" in info.value.reason
    gate.check(req("stripe.charge", amount=100))  # nothing was kept by the refusals


def test_a_denied_approval_hands_the_budget_back_and_an_approved_one_keeps_it() -> None:
    approver = Approver(False)
    gate = PreFlightGate(limits=[BudgetLimit("total", arg="amount", max_total=100, window=3600)],
                         approval_provider=approver, store=MemoryLimitStore())
    with pytest.raises(StepRefused) as info:
        gate.check(req("wire.send", "IRREVERSIBLE", amount=70))
    assert info.value.rule == "irreversible"
    assert "denied by risk@corp" in str(info.value)
    approver.answer = True
    gate.check(req("wire.send", "IRREVERSIBLE", amount=70))
    with pytest.raises(StepRefused, match="over limit 'total'"):
        gate.check(req("stripe.charge", amount=70))


def test_an_authorized_step_keeps_its_budget_when_it_fails_or_is_compensated() -> None:
    gate = PreFlightGate(limits=[BudgetLimit("total", arg="amount", max_total=100, window=3600)],
                         store=MemoryLimitStore())
    refunds: list[str] = []

    def timed_out() -> None:
        raise TimeoutError("card network did not answer")  # it may well have charged

    with pytest.raises(SagaAborted), saga_scope(MemoryWAL(), gate=gate) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=timed_out, args={"amount": 40},
                  compensate=Compensation(fn=lambda: refunds.append("t")))
    with pytest.raises(SagaAborted), saga_scope(MemoryWAL(), gate=gate) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch_2"}, args={"amount": 40},
                  compensate=lambda r: Compensation(fn=lambda: refunds.append(r["id"])))
        raise RuntimeError("the agent changed its mind")
    assert refunds == ["t", "ch_2"]  # both undone: the money came back, the budget does not
    assert not charge_in_saga(gate, amount=40)  # 40 + 40 + 40 > 100: gross outflow is metered
    assert charge_in_saga(gate, amount=20)


# -- fail closed -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "no argument 'amount'"),
        ({"amount": "lots"}, "not a non-negative finite number"),
        ({"amount": -50_000}, "not a non-negative finite number"),  # a negative charge must not earn budget
        ({"amount": float("nan")}, "not a non-negative finite number"),
        ({"amount": True}, "not a non-negative finite number"),
        ({"amount": 5}, "no argument 'customer_id'"),
    ],
)
def test_a_limit_that_cannot_read_what_it_polices_refuses(args: dict[str, Any], fragment: str) -> None:
    gate = PreFlightGate(limits=[
        BudgetLimit("total", arg="amount", max_total=100, window=3600),
        BudgetLimit("per-customer", arg="amount", max_total=100, window=3600, scope=by_arg("customer_id")),
    ], store=MemoryLimitStore())
    with pytest.raises(StepRefused, match=fragment):
        gate.check(req(**args))
    gate.check(req(amount=100, customer_id="c"))  # and the refusals left nothing behind


def test_numeric_strings_are_read_and_when_narrows_what_a_limit_polices() -> None:
    gate = PreFlightGate(limits=[
        BudgetLimit("spend", arg="amount", max_total=100, window=60, when=tool_is("stripe.*")),
    ], store=MemoryLimitStore())
    gate.check(req("search.web", "REVERSIBLE", query="x"))  # not policed: no amount needed
    gate.check(req("stripe.charge", amount="99.50"))
    with pytest.raises(StepRefused):
        gate.check(req("stripe.refund", amount="0.51"))


def test_over_budget_escalates_to_a_human_only_when_one_is_configured() -> None:
    limit = BudgetLimit("wire-ceiling", arg="amount", max_total=1000, window=3600, escalate_to_human=True)
    daily = BudgetLimit("daily", arg="amount", max_total=5000, window=3600)
    store = MemoryLimitStore()
    no_human = PreFlightGate(limits=[daily, limit], store=store)
    no_human.check(req("wire.send", amount=900))
    with pytest.raises(StepRefused) as info:
        no_human.check(req("wire.send", amount=200))
    assert info.value.rule == "limit:wire-ceiling"
    assert "no approval_provider" in info.value.reason

    approver = Approver(True)
    gated = PreFlightGate(limits=[daily, limit], approval_provider=approver, store=store)
    gated.check(req("wire.send", amount=200))
    (asked,) = approver.requests
    assert asked.rule == "limit:wire-ceiling"
    assert asked.escalated_limits == ("wire-ceiling:*",)
    # The approved overrun is spent: every further wire needs a human too, and "daily" kept all of it.
    approver.answer = False
    with pytest.raises(StepRefused, match="denied"):
        gated.check(req("wire.send", amount=1))
    assert_total(gated, "daily", 1100.0)
    assert_total(gated, "wire-ceiling", 1100.0)


def test_limits_are_checked_before_rules_so_no_human_is_asked_about_an_impossible_call() -> None:
    approver = Approver(True)
    gate = PreFlightGate(limits=[BudgetLimit("total", arg="amount", max_total=100, window=60)],
                         approval_provider=approver, store=MemoryLimitStore())
    with pytest.raises(StepRefused, match="over limit"):
        gate.check(req("wire.send", "IRREVERSIBLE", amount=101))
    assert approver.requests == []


# -- windows and scopes ----------------------------------------------------------------------


def test_the_window_slides_rather_than_resetting_on_a_boundary() -> None:
    clock = Clock(0.0)
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=100, window=10)],
                         store=MemoryLimitStore(clock=clock))
    gate.check(req(amount=60))  # t=0
    clock.advance(5)
    gate.check(req(amount=40))  # t=5
    clock.advance(4)
    with pytest.raises(StepRefused):
        gate.check(req(amount=1))  # t=9: 100 in the window
    clock.advance(1)
    gate.check(req(amount=60))  # t=10: the t=0 charge has left the window
    clock.advance(2)
    with pytest.raises(StepRefused):
        gate.check(req(amount=1))  # t=12: 40 + 60; a fixed [10, 20) window would say 60


def test_rate_limit_scopes_split_the_count() -> None:
    gate = PreFlightGate(limits=[
        RateLimit("per-tool", max_calls=2, window=60, scope=by_tool),
        RateLimit("per-tool-and-customer", max_calls=1, window=60, scope=combine(by_tool, by_arg("c"))),
    ], store=MemoryLimitStore())
    gate.check(req("a", c=1))
    with pytest.raises(StepRefused, match="per-tool-and-customer"):
        gate.check(req("a", c=1))
    gate.check(req("a", c=2))
    with pytest.raises(StepRefused) as info:
        gate.check(req("a", c=3))
    assert info.value.rule == "limit:per-tool"
    gate.check(req("b", c=1))  # another tool, its own windows


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 60)), min_size=1, max_size=60))
def test_the_store_agrees_with_a_sliding_window_model(calls: list[tuple[int, int]]) -> None:
    clock = Clock(0.0)
    store = MemoryLimitStore(clock=clock)
    window, cap = 50.0, 100.0
    kept: list[tuple[float, float]] = []
    for dt, amount in calls:
        clock.advance(dt)
        now = clock.now
        in_window = sum(a for t, a in kept if t > now - window)
        expected = in_window + amount <= cap
        result = store.debit([Charge("k", cap, window, float(amount))])
        assert (result.refused is None) == expected
        if expected:
            kept.append((now, float(amount)))
        assert sum(a for t, a in kept if t > now - window) <= cap


# -- rules -------------------------------------------------------------------------------------


def test_irreversible_needs_a_human_by_default_and_is_blocked_without_one() -> None:
    wal, sent = MemoryWAL(), []
    with pytest.raises(SagaAborted) as info, saga_scope(wal, gate=PreFlightGate()) as s:
        s.execute(tool="email.send", semantics="IRREVERSIBLE", forward=lambda: sent.append(1))
    assert isinstance(info.value.cause, StepRefused)
    assert info.value.cause.rule == "irreversible"
    assert sent == []
    assert "STEP_INTENT" not in [r["type"] for r in wal.records()]

    approver = Approver(True)
    with saga_scope(MemoryWAL(), gate=PreFlightGate(approval_provider=approver)) as s:
        s.execute(tool="email.send", semantics="IRREVERSIBLE", forward=lambda: sent.append(1), args={"to": "a@b"})
    assert sent == [1]
    assert approver.requests[0].step.args == {"to": "a@b"}
    assert approver.requests[0].reason == "the action cannot be undone"


async def test_the_async_face_asks_the_provider_asynchronously() -> None:
    approver = Approver(lambda r: ApprovalDecision(r.step.args["amount"] < 100, "cfo@corp"))
    gate = PreFlightGate(approval_provider=approver)
    async with saga_scope(MemoryWAL(), gate=gate) as s:
        await s.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: "sent", args={"amount": 5})
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL(), gate=gate) as s:
            await s.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: "sent",
                            args={"amount": 500})
    assert "denied by cfo@corp" in str(info.value.cause)


@pytest.mark.parametrize("answer", [RuntimeError("slack webhook 500"), "yes", None, ApprovalDecision(1, "x")])  # type: ignore[arg-type]
def test_anything_but_an_explicit_approval_refuses(answer: Any) -> None:
    def respond(_: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    gate = PreFlightGate(limits=[BudgetLimit("t", arg="amount", max_total=10, window=60)],
                         approval_provider=Approver(respond), store=MemoryLimitStore())
    with pytest.raises(StepRefused):
        gate.check(req("wire.send", "IRREVERSIBLE", amount=10))
    PreFlightGate(limits=gate.limits, store=gate.store).check(req(amount=10))  # budget handed back


def test_the_most_restrictive_matching_rule_wins_whatever_the_order() -> None:
    block = Rule("big", arg_exceeds("amount", 1000), "block")
    allow = Rule("wires-ok", tool_is("wire.*"), "allow")
    for rules in ([block, allow], [allow, block]):
        gate = PreFlightGate(rules)
        gate.check(req("wire.send", "IRREVERSIBLE", amount=10))  # ALLOW waives the default
        with pytest.raises(StepRefused) as info:
            gate.check(req("wire.send", "IRREVERSIBLE", amount=5000))
        assert info.value.rule == "big"


def test_conditions_compose_and_custom_predicates_work() -> None:
    risky = semantics_is("IRREVERSIBLE", "COMPENSABLE") & ~tool_is("stripe.refund") | (lambda r: "vip" in r.tags)
    assert risky(req("stripe.charge"))
    assert not risky(req("stripe.refund"))
    assert risky(req("db.read", "REVERSIBLE", tags=("vip",)))
    big = arg_exceeds("amount", 1000)
    assert big(req(amount="5000"))
    assert not big(req(amount=999))
    assert not big(req())
    assert big(req(amount="a lot"))  # unreadable counts as over the line
    gate = PreFlightGate([Rule("custom", lambda r: r.args.get("to", "").endswith("@evil.com"), "block")])
    with pytest.raises(StepRefused, match="custom"):
        gate.check(req("email.draft", "REVERSIBLE", to="x@evil.com"))


def test_bad_configuration_names_what_is_wrong() -> None:
    with pytest.raises(ConfigurationError, match="needs arg="):
        BudgetLimit("x", max_total=10, window=60)
    with pytest.raises(ConfigurationError, match="max_total must be a positive number"):
        BudgetLimit("x", arg="amount", max_total=-1, window=60)
    with pytest.raises(ConfigurationError, match="max_calls"):
        RateLimit("x", window=60)
    with pytest.raises(ConfigurationError, match="two limits are named"):
        PreFlightGate(limits=[RateLimit("x", max_calls=1, window=1), RateLimit("x", max_calls=2, window=1)])
    with pytest.raises(ConfigurationError, match="'block', 'approve', 'allow' or 'advise'"):
        Rule("r", tool_is("a"), "deny")
    with pytest.raises(ConfigurationError, match="rules= takes Rule"):
        PreFlightGate([tool_is("a")])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="request_approval"):
        PreFlightGate(approval_provider=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown semantics"):
        semantics_is("MAYBE")
