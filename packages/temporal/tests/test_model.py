"""The workflow's pure rules, over many inputs: only an exact copy of an offered step passes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from agent_saga_temporal.model import (
    FINISH,
    Limits,
    Proposal,
    StepOption,
    UndoSpec,
    Unresolvable,
    allowed_options,
    judge,
    resolve_refs,
)
from hypothesis import given
from hypothesis import strategies as st

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)), max_leaves=8)
arg_maps = st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=4)
options = st.lists(
    st.builds(StepOption, st.text(min_size=1, max_size=8), arg_maps, st.sampled_from(["COMPENSABLE"]), st.just("")),
    min_size=1, max_size=4, unique_by=lambda o: o.choice,
)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@given(options, st.data(), st.floats(0, 1), st.floats(0, 1))
def test_an_exact_copy_of_an_option_passes_iff_confident_enough(
    offered: list[StepOption], data: st.DataObject, confidence: float, minimum: float
) -> None:
    option = data.draw(st.sampled_from(offered))
    verdict = judge(Proposal(option.choice, json.loads(json.dumps(option.args)), confidence), offered,
                    Limits(min_confidence=minimum))
    assert (verdict is None) == (confidence >= minimum)
    if verdict is not None:
        assert verdict[0] == "low_confidence"


@given(options, st.text(max_size=8), arg_maps)
def test_anything_else_is_refused(offered: list[StepOption], choice: str, args: dict[str, Any]) -> None:
    option = next((o for o in offered if o.choice == choice), None)
    verdict = judge(Proposal(choice, args, 1.0), offered, Limits())
    if option is None:
        assert verdict is not None and verdict[0] == "not_allowed"
    elif canonical(args) != canonical(option.args):
        assert verdict is not None and verdict[0] == "forged_args"
    else:
        assert verdict is None


@pytest.mark.parametrize(("offered", "forged"), [
    ({"quantity": 2}, {"quantity": True}),  # True == 1 in Python; not the offered argument
    ({"amount": 4200}, {"amount": 4200.0}),
    ({"a": 1}, {"a": 1, "b": 2}),
    ({"a": 1, "b": 2}, {"a": 1}),
])
def test_lookalike_arguments_are_forgeries(offered: dict[str, Any], forged: dict[str, Any]) -> None:
    option = StepOption("step", offered, "COMPENSABLE", "")
    assert judge(Proposal("step", forged), [option], Limits()) == (
        "forged_args", f"the arguments of 'step' must be exactly the offered ones {offered!r}, got {forged!r}",
    )


@pytest.mark.parametrize("confidence", [float("nan"), -0.1, 1.5, True, "0.9"])
def test_a_confidence_outside_0_to_1_is_malformed(confidence: Any) -> None:
    option = StepOption("step", {}, "COMPENSABLE", "")
    verdict = judge(Proposal("step", {}, confidence), [option], Limits())
    assert verdict is not None and verdict[0] == "malformed"


def test_options_follow_the_after_order_and_always_offer_finish() -> None:
    job = checkout_job()
    # The checkout names its finishing choice (finish: verify_order); a job that does not says finish.
    assert [o.choice for o in allowed_options(job, [])] == ["reserve_inventory", "verify_order"]
    assert [o.choice for o in allowed_options(job, ["reserve_inventory"])] == ["charge_payment", "verify_order"]
    unnamed = dataclasses.replace(job, finish=FINISH)
    assert [o.choice for o in allowed_options(unnamed, [])] == ["reserve_inventory", FINISH]
    charge = allowed_options(job, ["reserve_inventory"])[0]
    assert charge.args == {"order_id": "order-1001", "amount_cents": 4200, "customer": "cust-7"}


def test_references_fill_in_or_refuse() -> None:
    sources = {"facts": {"a": {"b": [10, 20]}}, "args": {"x": 1}}
    assert resolve_refs({"v": "$facts.a.b.1", "w": ["$args.x"], "lit": "$$5"}, sources) == {
        "v": 20, "w": [1], "lit": "$5",
    }
    with pytest.raises(Unresolvable, match=r"\$result.id: the result is not known"):
        resolve_refs({"id": "$result.id"}, sources)
    with pytest.raises(Unresolvable, match=r"no 'c' in \{b\}"):
        resolve_refs("$facts.a.c", sources)
    assert UndoSpec("h", {"k": "$args.x"}).prebound
    assert not UndoSpec("h", {"k": ["$result.id"]}).prebound
