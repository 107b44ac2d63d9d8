"""Argument provenance (issue 26 part 1): tags verified at the gate, refusals logged before the effect."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    ContextBroker,
    FileWAL,
    MemoryWAL,
    PreFlightGate,
    Provenance,
    ProvenancePolicy,
    SagaAborted,
    StepRefused,
    compensator,
    derived,
    saga_scope,
    sourced,
    tool,
    user_value,
)
from agent_saga.gate import Rule, tool_is
from agent_saga.log import read_records
from agent_saga.runtime import ProvenanceVerdict

INVOICE = (
    "ACME Corp. Invoice 17.\n\n"
    "Issued 2026-11-02 to Example Ltd.\n\n"
    "Line items: consulting 3,000.00 EUR; travel 1,200.00 EUR.\n\n"
    "Total due: 4,200.00 EUR. Pay by 2026-12-01.\n\n"
    "Questions: billing@acme.example"
)


@pytest.fixture
def world() -> tuple[ContextBroker, list[Any], str, ProvenancePolicy]:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", INVOICE)
    rid = broker.add_request("please pay invoice 17 for ACME, at most 5000")
    policy = ProvenancePolicy()
    policy.require("stripe.charge", "amount", Provenance.SOURCED)
    policy.prohibit("wire.transfer", "this deployment never initiates wires")
    return broker, spans, rid, policy


def test_the_issue_snippet_runs(world: tuple[ContextBroker, list[Any], str, ProvenancePolicy]) -> None:
    broker, spans, _, policy = world
    verdict = policy.check("stripe.charge", {"amount": sourced(4200, spans[3])}, broker=broker)
    assert isinstance(verdict, ProvenanceVerdict)
    assert verdict.allowed and verdict.reasons == ()
    assert verdict.arguments["amount"].claimed is Provenance.SOURCED
    assert verdict.arguments["amount"].verified is Provenance.SOURCED
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    assert gate.rules[0].name == "provenance"


def test_levels_are_ordered() -> None:
    assert Provenance.SOURCED > Provenance.USER > Provenance.DERIVED > Provenance.MODEL


def test_an_untagged_amount_is_model_and_refused(world: tuple[ContextBroker, list[Any], str, ProvenancePolicy]) -> None:
    broker, _, _, policy = world
    verdict = policy.check("stripe.charge", {"amount": 4200}, broker=broker)
    assert not verdict.allowed
    assert verdict.arguments["amount"].claimed is Provenance.MODEL
    assert verdict.reason == "argument 'amount' must be SOURCED or higher, verified MODEL: untagged " \
        "(a value nobody tagged is the model's)"
    missing = policy.check("stripe.charge", {}, broker=broker)
    assert missing.reasons == ("argument 'amount' is missing; it must be SOURCED or higher",)


def test_a_sourced_value_absent_from_its_span_is_refused(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, spans, _, policy = world
    for wrong in (42000, 14200, 4300, "4200 EUR"):
        verdict = policy.check("stripe.charge", {"amount": sourced(wrong, spans[3])}, broker=broker)
        assert not verdict.allowed, wrong
        assert verdict.arguments["amount"].verified is Provenance.MODEL
        assert f"is not in the span {spans[3].receipt}" in verdict.reason
    # the number is in the document, but not in the span the receipt names
    other = policy.check("stripe.charge", {"amount": sourced(4200, spans[2])}, broker=broker)
    assert not other.allowed
    for spelled in (4200, "4,200", Decimal("4200.00"), 4200.0):
        assert policy.check("stripe.charge", {"amount": sourced(spelled, spans[3])}, broker=broker).allowed


def test_a_drifted_document_downgrades(world: tuple[ContextBroker, list[Any], str, ProvenancePolicy]) -> None:
    broker, spans, _, policy = world
    tagged = sourced(4200, spans[3])
    assert policy.check("stripe.charge", {"amount": tagged}, broker=broker).allowed
    broker.add_document("invoice-17", INVOICE.replace("4,200.00", "4,250.00"))
    verdict = policy.check("stripe.charge", {"amount": tagged}, broker=broker)
    assert not verdict.allowed
    assert verdict.arguments["amount"].claimed is Provenance.SOURCED
    assert verdict.arguments["amount"].verified is Provenance.MODEL
    assert f"receipt {spans[3].receipt} does not resolve: drifted: hash mismatch" in verdict.reason


def test_an_evicted_document_downgrades_with_its_reason(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, spans, _, policy = world
    broker.evict("invoice-17", "dropped from the window at turn 9")
    verdict = policy.check("stripe.charge", {"amount": sourced(4200, spans[3])}, broker=broker)
    assert not verdict.allowed
    assert "does not resolve: evicted: dropped from the window at turn 9" in verdict.reason
    # a receipt from another broker (never admitted here) is no better
    assert "never admitted" in policy.check(
        "stripe.charge", {"amount": sourced(4200, spans[3])}, broker=ContextBroker()).reason


def test_user_values_must_be_verbatim_in_a_registered_request(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, _, rid, _ = world
    policy = ProvenancePolicy().require("stripe.charge", "customer", "USER").require("stripe.charge", "cap", "USER")
    ok = policy.check("stripe.charge", {"customer": user_value("ACME", rid), "cap": user_value(5000, rid)},
                      broker=broker)
    assert ok.allowed, ok.reason
    for bad, why in [
        (user_value("Acme", rid), "'Acme' is not in request 'r1'"),
        (user_value("ACME Corp", rid), "'ACME Corp' is not in request 'r1'"),
        (user_value("ACME", "r9"), "request 'r9' was never registered"),
    ]:
        verdict = policy.check("stripe.charge", {"customer": bad, "cap": user_value(5000, rid)}, broker=broker)
        assert not verdict.allowed and why in verdict.reason
    # SOURCED satisfies a USER requirement (that level or higher); MODEL does not
    broker2 = ContextBroker()
    span = broker2.add_document("crm", "Customer: ACME")[0]
    assert policy.check("stripe.charge", {"customer": sourced("ACME", span), "cap": 1}, broker=broker2).reasons == (
        "argument 'cap' must be USER or higher, verified MODEL: untagged (a value nobody tagged is the model's)",
    )


def test_derived_values_are_recomputed(world: tuple[ContextBroker, list[Any], str, ProvenancePolicy]) -> None:
    broker, spans, rid, _ = world
    policy = ProvenancePolicy().require("stripe.charge", "amount", Provenance.DERIVED)
    consulting, travel = sourced(3000, spans[2]), sourced(1200, spans[2])

    def check(value: Any) -> Any:
        return policy.check("stripe.charge", {"amount": value}, broker=broker)

    assert check(derived(4200, from_=[consulting, travel], how="sum")).allowed
    assert check(derived(1800, from_=[consulting, travel], how="difference")).allowed
    assert check(derived(2.5, from_=[consulting, travel], how="ratio")).allowed
    assert check(derived(0.4, from_=[travel, consulting], how="ratio")).allowed
    assert check(derived(3600000, from_=[consulting, travel], how="product")).allowed
    assert check(derived(3000, from_=[sourced(2999.6, broker.add_document("m", "x 2999.6")[0])], how="round")).allowed
    assert check(derived(4200, from_=[sourced(4200, spans[3])], how=lambda x: x)).allowed
    assert check(derived(5000 - 4200, from_=[user_value(5000, rid), sourced(4200, spans[3])],
                         how="difference")).allowed

    third = broker.add_document("thirds", "1 of 3 parts; 2.5 rounds")[0]
    one, three, half = sourced(1, third), sourced(3, third), sourced(2.5, third)
    assert check(derived(0.33, from_=[one, three], how="ratio")).allowed  # at the places it is written with
    assert not check(derived(0.34, from_=[one, three], how="ratio")).allowed
    assert check(derived(2, from_=[half], how="round")).allowed  # half-even
    assert check(derived(3, from_=[half], how="round")).allowed  # half-up
    assert not check(derived(4, from_=[half], how="round")).allowed

    mismatch = check(derived(4300, from_=[consulting, travel], how="sum"))
    assert not mismatch.allowed
    assert "the sum of the inputs is 4200, not 4300" in mismatch.reason
    # a derivation from an unsourced input is no better than the input
    weak = check(derived(4200, from_=[consulting, 1200], how="sum"))
    assert not weak.allowed and "input 1 of the sum: untagged" in weak.reason
    # ... nor from an input whose own check fails
    lying = check(derived(4300, from_=[consulting, sourced(1300, spans[2])], how="sum"))
    assert not lying.allowed and "input 1 of the sum: 1300 is not in the span" in lying.reason
    # DERIVED does not meet a SOURCED requirement
    strict = ProvenancePolicy().require("stripe.charge", "amount", "SOURCED")
    assert not strict.check("stripe.charge", {"amount": derived(4200, from_=[consulting, travel], how="sum")},
                            broker=broker).allowed
    with pytest.raises(ValueError, match="not a built-in operation; use one of sum, difference"):
        derived(1, from_=[1], how="average")


@given(a=st.integers(min_value=-10**6, max_value=10**6), b=st.integers(min_value=-10**6, max_value=10**6),
       off=st.integers(min_value=-3, max_value=3))
def test_a_sum_holds_exactly_when_it_is_the_sum(a: int, b: int, off: int) -> None:
    broker = ContextBroker()
    span = broker.add_document("d", f"first {a} then {b}.")[0]
    policy = ProvenancePolicy().require("t", "x", "DERIVED")
    verdict = policy.check("t", {"x": derived(a + b + off, from_=[sourced(a, span), sourced(b, span)], how="sum")},
                           broker=broker)
    assert verdict.allowed is (off == 0)


def test_prohibit_refuses_always(world: tuple[ContextBroker, list[Any], str, ProvenancePolicy]) -> None:
    broker, spans, _, policy = world
    verdict = policy.check("wire.transfer", {"amount": sourced(4200, spans[3])}, broker=broker)
    assert not verdict.allowed
    assert verdict.reasons == ("wire.transfer is prohibited: this deployment never initiates wires",)


# -- through the gate and the engine --------------------------------------------------------------

CHARGED: list[Any] = []


@compensator("prov_test.refund")
def refund(charge_id: str) -> None:
    CHARGED.append(("refund", charge_id))


@tool(semantics="COMPENSABLE", compensate=lambda charge_id: {"handler": "prov_test.refund", "kwargs": {"charge_id": charge_id}},
      name="stripe.charge")
def charge(amount: Any, currency: str = "EUR") -> str:
    CHARGED.append(amount)
    return f"ch_{len(CHARGED)}"


@tool(semantics="IRREVERSIBLE", name="wire.transfer")
def wire(amount: Any) -> str:
    CHARGED.append(("wire", amount))
    return "wired"


def _records(wal: MemoryWAL, rtype: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == rtype]


def test_the_tool_gets_the_plain_value_and_the_log_gets_level_and_receipt(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, spans, _, policy = world
    CHARGED.clear()
    wal = MemoryWAL()
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    with saga_scope(wal, gate=gate):
        assert charge(sourced(4200, spans[3])) == "ch_1"
        charge(amount=sourced(Decimal("4200.00"), spans[3]), currency="EUR")
    assert [4200, Decimal("4200.00")] == CHARGED
    assert all(type(v) in (int, Decimal) for v in CHARGED)
    intents = _records(wal, "STEP_INTENT")
    assert intents[0]["body"]["args"] == {"amount": 4200}
    assert intents[0]["body"]["provenance"] == {"amount": {"level": "SOURCED", "receipt": spans[3].receipt.as_dict()}}
    raw = json.dumps(list(wal.records()), default=str)
    assert "Total due" not in raw and "ACME Corp" not in raw  # never the document's text
    # outside any saga the tool is called straight through, still with the plain value
    assert charge(sourced(4200, spans[3])) == "ch_3" and CHARGED[-1] == 4200 and type(CHARGED[-1]) is int


def test_an_untagged_amount_is_refused_before_the_effect_with_a_step_refused_record(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, _, _, policy = world
    CHARGED.clear()
    wal = MemoryWAL()
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    with pytest.raises((StepRefused, SagaAborted)), saga_scope(wal, gate=gate):
        charge(4200)
    assert CHARGED == []
    types = [r["type"] for r in wal.records()]
    assert "STEP_INTENT" not in types  # refused before the intent, so before any effect
    (refused,) = _records(wal, "STEP_REFUSED")
    assert refused["body"]["rule"] == "provenance"
    assert refused["body"]["reason"].startswith("argument 'amount' must be SOURCED or higher, verified MODEL")


def test_prohibit_writes_a_step_refused_record_before_the_effect(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, spans, _, policy = world
    CHARGED.clear()
    wal = MemoryWAL()
    # An ALLOW rule for the tool cannot waive a provenance refusal.
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker), Rule("wires-ok", tool_is("wire.*"), "allow")])
    with pytest.raises((StepRefused, SagaAborted)), saga_scope(wal, gate=gate):
        wire(sourced(4200, spans[3]))
    assert CHARGED == []
    (refused,) = _records(wal, "STEP_REFUSED")
    assert refused["body"]["rule"] == "provenance"
    assert refused["body"]["reason"] == "wire.transfer is prohibited: this deployment never initiates wires"
    assert refused["body"]["provenance"] == {"amount": {"level": "SOURCED", "receipt": spans[3].receipt.as_dict()}}
    assert [r["type"] for r in wal.records()].index("STEP_REFUSED") < len(list(wal.records()))


def test_a_refused_call_hands_back_the_budget_it_debited(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    from agent_saga import BudgetLimit
    from agent_saga.gate import MemoryLimitStore

    broker, spans, _, policy = world
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)],
                         limits=[BudgetLimit("spend", arg="amount", max_total=5000, window=3600)],
                         store=MemoryLimitStore())
    for _ in range(3):  # 3 x 4200 would be over 5000 if refusals kept their debit
        with pytest.raises((StepRefused, SagaAborted)), saga_scope(MemoryWAL(), gate=gate):
            charge(4200)
    with saga_scope(MemoryWAL(), gate=gate):
        charge(sourced(4200, spans[3]))


def test_derived_and_user_claims_travel_into_the_log(
    world: tuple[ContextBroker, list[Any], str, ProvenancePolicy],
) -> None:
    broker, spans, rid, _ = world
    wal = MemoryWAL()
    policy = ProvenancePolicy().require("stripe.charge", "amount", "DERIVED")
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    amount = derived(800, from_=[user_value(5000, rid), sourced(4200, spans[3])], how="difference")
    with saga_scope(wal, gate=gate):
        charge(amount)
    (intent,) = _records(wal, "STEP_INTENT")
    assert intent["body"]["args"] == {"amount": 800}
    assert intent["body"]["provenance"] == {"amount": {
        "level": "DERIVED", "how": "difference",
        "from": [{"level": "USER", "request": rid},
                 {"level": "SOURCED", "receipt": spans[3].receipt.as_dict()}],
    }}


def test_bad_policy_input_is_a_one_line_error() -> None:
    from agent_saga import ConfigurationError

    with pytest.raises(ConfigurationError, match="not a provenance level: 'SOURCE'"):
        ProvenancePolicy().require("t", "a", "SOURCE")
    with pytest.raises(ConfigurationError, match="the reason must be a non-empty str"):
        ProvenancePolicy().prohibit("t", "")
    with pytest.raises(TypeError, match=r"must be a Span from broker\.add_document"):
        sourced(1, "invoice-17")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="already tagged"):
        sourced(sourced(1, ContextBroker().add_document("d", "1")[0]), ContextBroker().add_document("d", "1")[0])


def test_the_engine_unwraps_tags_only_where_it_can_see_them() -> None:
    import functools

    from agent_saga.engine.tagged import Tagged, untag_args, untag_call

    span = ContextBroker().add_document("d", "total 7")[0]

    def f(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return args, kwargs

    plain = functools.partial(f, 1, b=2)
    assert untag_call(plain) is plain  # nothing tagged: the same call
    tagged = functools.partial(f, sourced(7, span), b=user_value(2, "r1"))
    assert untag_call(tagged)() == ((7,), {"b": 2})
    closure = lambda: sourced(7, span)  # the caller's own closure is left alone
    assert untag_call(closure) is closure
    args = {"a": 1}
    assert untag_args(args) == (args, {})
    values, tags = untag_args({"a": sourced(7, span), "b": [sourced(7, span)]})
    assert values["a"] == 7 and isinstance(values["b"][0], Tagged)  # only top-level arguments
    assert list(tags) == ["a"]
    with pytest.raises(NotImplementedError):
        _ = Tagged().plain
    with pytest.raises(NotImplementedError):
        Tagged().claim()


# -- issue 40 item 5: provenance matches on token boundaries, quantities whole, documents by origin ----------


PAYEE = (
    "Pay to account acct_97 at ACME Bank.\n\n"
    "IBAN DE89 3704 0044 0532 0130 00, or DE89370400440532013000 written without spaces.\n\n"
    "Total due: 4,200.00 EUR."
)


def _payee_check(value: Any, arg: str = "to") -> Any:
    broker = ContextBroker()
    spans = broker.add_document("payee", PAYEE)
    policy = ProvenancePolicy().require("bank.pay", arg, Provenance.SOURCED)
    span = next(s for s in spans if (str(value) if not isinstance(value, str) else value)[:4] in s.text)
    return policy.check("bank.pay", {arg: sourced(value, span)}, broker=broker).arguments[arg]


@pytest.mark.parametrize("forged", ["acct_9", "DE8937040044053201300", "DE89 3704 0044 0532 0130 0", "ACME Ban"])
def test_an_identifier_is_not_sourced_from_a_longer_one(forged: str) -> None:
    got = _payee_check(forged)
    assert got.verified is Provenance.MODEL and "is not in the span" in got.reason


@pytest.mark.parametrize("genuine", ["acct_97", "DE89370400440532013000", "DE89 3704 0044 0532 0130 00", "ACME Bank"])
def test_an_identifier_is_sourced_from_itself(genuine: str) -> None:
    assert _payee_check(genuine).verified is Provenance.SOURCED


@pytest.mark.parametrize(("value", "text"), [
    (4200, "x = 4200e-3 units"), (4200, "revenue: 4200 thousand EUR"), (4200, "revenue: 4200k EUR"),
    (4200, "see invoice-4200"), (4200, "ref INV4200"), (4200, "order #4200"), (4.2, "Gesamt: 4.200 EUR"),
    (4200, "Gesamt: 4.200 EUR"), (4200, "4.2E3 EUR"), (4200, "4200 million"),
])
def test_a_number_beside_an_exponent_a_scale_or_inside_an_identifier_is_another_quantity(
    value: Any, text: str,
) -> None:
    broker = ContextBroker()
    [span] = broker.add_document("doc", text)
    policy = ProvenancePolicy().require("bank.pay", "amount", Provenance.SOURCED)
    got = policy.check("bank.pay", {"amount": sourced(value, span)}, broker=broker).arguments["amount"]
    assert got.verified is Provenance.MODEL, text


def test_a_decimal_with_a_positive_exponent_is_refused_and_decimals_are_logged_by_value(tmp_path: Path) -> None:
    broker = ContextBroker()
    policy = ProvenancePolicy().require("bank.pay", "amount", Provenance.DERIVED)
    rid = broker.add_request("refund the 5000 you charged")
    forged = derived(Decimal("1E+4"), [user_value(5000, rid)], "round")  # the tool would get 10000
    got = policy.check("bank.pay", {"amount": forged}, broker=broker).arguments["amount"]
    assert got.verified is Provenance.MODEL and "positive exponent" in got.reason and "Decimal('1E+4')" in got.reason
    honest = derived(Decimal("5000"), [user_value(5000, rid)], "round")
    assert policy.check("bank.pay", {"amount": honest}, broker=broker).allowed
    with FileWAL(tmp_path / "agent.wal") as wal, saga_scope(wal) as s:
        s.execute(tool="bank.quote", semantics="REVERSIBLE", forward=lambda: None,
                  args={"amount": Decimal("1E+4"), "fee": Decimal("4.20")})
    [committed] = [r["body"] for r in read_records(tmp_path / "agent.wal") if r["type"] == "STEP_COMMITTED"]
    assert committed["args"] == {"amount": "<Decimal 1E+4>", "fee": "<Decimal 4.20>"}


def test_a_document_the_agent_shaped_cannot_source_its_own_payment() -> None:
    broker = ContextBroker()
    [invoice] = broker.add_document("erp-17", "Total due: 4,200.00 EUR.", origin="erp")
    # The agent wrote a note through a tool; the tool's answer comes back as a document.
    [echo] = broker.add_document("note-1", "Total due: 9,999.00 EUR.", origin="tool:crm.note")
    policy = ProvenancePolicy().require("bank.pay", "amount", Provenance.SOURCED, from_origins={"erp"})
    refused = policy.check("bank.pay", {"amount": sourced(9999, echo)}, broker=broker)
    assert not refused.allowed
    assert "document 'note-1' is from origin 'tool:crm.note', not from erp" in refused.reason
    assert policy.check("bank.pay", {"amount": sourced(4200, invoice)}, broker=broker).allowed
    # Derived from it: the same rule for its inputs.
    rounded = derived(10000, [sourced(9999, echo)], "round")
    assert not policy.check("bank.pay", {"amount": rounded}, broker=broker).allowed
    # A policy that names no origin takes any document, as before.
    assert ProvenancePolicy().require("bank.pay", "amount", Provenance.SOURCED).check(
        "bank.pay", {"amount": sourced(9999, echo)}, broker=broker).allowed


@settings(max_examples=examples(200), deadline=None)
@given(
    token=st.from_regex(r"[A-Za-z][A-Za-z0-9_]{1,12}", fullmatch=True),
    more=st.from_regex(r"[A-Za-z0-9_]{1,4}", fullmatch=True),
    before=st.sampled_from(["", "to ", "(", "account: "]),
    after=st.sampled_from(["", ".", " now", ")", ", then"]),
)
def test_an_identifier_is_sourced_only_whole(token: str, more: str, before: str, after: str) -> None:
    broker = ContextBroker()
    [span] = broker.add_document("doc", f"{before}{token}{more}{after}")
    policy = ProvenancePolicy().require("bank.pay", "to", Provenance.SOURCED)
    assert not policy.check("bank.pay", {"to": sourced(token, span)}, broker=broker).allowed
    assert policy.check("bank.pay", {"to": sourced(token + more, span)}, broker=broker).allowed
