"""The declarative tool policy: validation names the entry; paths resolve; nothing is guessed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import (
    ActionSemantics,
    CompensationError,
    MemoryWAL,
    SagaAborted,
    StepRefused,
    compensator,
    saga_scope,
)
from agent_saga.plugins import PolicyError, ToolPolicy, policy_schema
from agent_saga.plugins.policy import JsonPath, PolicyUndo
from agent_saga.redaction import looks_secret
from agent_saga.registry import from_recipe

UNDONE: list[dict[str, Any]] = []


@compensator("policy_test.refund")
def refund(charge_id: str, reason: str) -> None:
    UNDONE.append({"charge_id": charge_id, "reason": reason})


GOOD = {
    "mode": "enforce",
    "tools": {
        "stripe_charge": {"semantics": "COMPENSABLE",
                          "compensate": {"handler": "policy_test.refund",
                                         "args": {"charge_id": "$.charge.id", "reason": "rollback"}}},
        "search_*": {"semantics": "REVERSIBLE"},
        "search_exact": {"semantics": "IRREVERSIBLE"},
    },
}


def test_a_good_policy_loads_from_a_file_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(GOOD))
    policy = ToolPolicy.load(path)
    assert policy.mode == "enforce"
    assert ToolPolicy.from_dict(policy.to_dict()) == ToolPolicy.from_dict(GOOD)
    assert policy.rule_for("search_exact").semantics is ActionSemantics.IRREVERSIBLE  # exact beats glob
    assert policy.rule_for("search_web").semantics is ActionSemantics.REVERSIBLE
    assert policy.rule_for("send_email") is None
    assert policy.spec_for("send_email") is None


@pytest.mark.parametrize(("doc", "message"), [
    ({"mode": "strict"}, "mode must be 'observe' or 'enforce'"),
    ({"tools": {"t": {}}}, r"tools\['t'\] has no 'semantics'"),
    ({"tools": {"t": {"semantics": "probably"}}}, r"tools\['t'\]: semantics 'probably' is not one of"),
    ({"tools": {"t": {"semantics": "COMPENSABLE"}}}, r"tools\['t'\] is COMPENSABLE but has no 'compensate'"),
    ({"tools": {"t": {"semantics": "IRREVERSIBLE", "compensate": {"handler": "h"}}}}, "is IRREVERSIBLE but has 'compensate'"),
    ({"tools": {"t": {"semantics": "COMPENSABLE", "compensate": {"handler": "h", "args": {"x": "$.a b"}}}}},
     r"tools\['t'\].compensate.args\['x'\]: cannot read JSON path"),
    ({"tools": {"t": {"semantics": "COMPENSABLE", "compensate": {"args": {}}}}}, "needs 'handler'"),
    ({"tools": {"t": {"semantics": "REVERSIBLE", "undo": 1}}}, r"tools\['t'\]: unknown keys \['undo'\]"),
    ({"tool": {}}, r"unknown top-level keys \['tool'\]"),
    ([], "a tool policy is a JSON object"),
])
def test_bad_policies_name_the_entry_and_the_fix(doc: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        ToolPolicy.from_dict(doc)


def test_unreadable_files_say_where(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text("{nope")
    with pytest.raises(PolicyError, match=r"p.json' is not valid JSON: .* line 1"):
        ToolPolicy.load(tmp_path / "p.json")
    with pytest.raises(PolicyError, match="cannot read tool policy"):
        ToolPolicy.load(tmp_path / "missing.json")


def test_the_policy_undo_comes_from_the_result_and_runs_on_rollback() -> None:
    spec = ToolPolicy.from_dict(GOOD).spec_for("stripe_charge")
    assert spec is not None
    assert spec.semantics is ActionSemantics.COMPENSABLE
    UNDONE.clear()
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        spec.call_sync(lambda amount: {"charge": {"id": "ch_9"}}, (), {"amount": 5})
        raise RuntimeError("later")
    assert UNDONE == [{"charge_id": "ch_9", "reason": "rollback"}]
    assert caught.value.report.clean


def test_a_path_missing_from_the_result_is_a_clear_compensation_error() -> None:
    spec = ToolPolicy.from_dict(GOOD).spec_for("stripe_charge")
    assert spec is not None
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        spec.call_sync(lambda: {"id": "ch_9"}, (), {})
    assert isinstance(caught.value.cause, CompensationError)
    assert "tool policy entry 'stripe_charge'" in str(caught.value.cause)
    assert "$.charge.id" in str(caught.value.cause)


def test_the_skeleton_classifies_nothing_as_undoable() -> None:
    skeleton = ToolPolicy.skeleton(["b", "a", "b"])
    assert list(skeleton["tools"]) == ["a", "b"]
    assert {e["semantics"] for e in skeleton["tools"].values()} == {"IRREVERSIBLE"}
    assert ToolPolicy.from_dict(skeleton).mode == "enforce"


keys = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)
json_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=10,
)


@given(json_values, st.lists(keys | st.integers(0, 3), max_size=4))
def test_json_paths_find_exactly_what_indexing_finds(doc: Any, steps: list[Any]) -> None:
    text = "$" + "".join(f"[{s}]" if isinstance(s, int) else f"['{s}']" for s in steps)
    path = JsonPath.parse(text)
    expected: Any = doc
    try:
        for s in steps:
            if isinstance(s, int) and not isinstance(expected, list):
                raise KeyError(s)
            if isinstance(s, str) and not isinstance(expected, dict):
                raise KeyError(s)
            expected = expected[s]
    except (KeyError, IndexError):
        with pytest.raises(KeyError):
            path.find(doc)
        return
    assert path.find(doc) == expected


def test_the_published_schema_agrees_with_the_validator() -> None:
    schema = policy_schema()
    assert schema["$defs"]["entry"]["properties"]["semantics"]["enum"] == [m.value for m in ActionSemantics]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(GOOD, schema)
    for bad in ({"tools": {"t": {"semantics": "COMPENSABLE"}}}, {"mode": "strict"},
                {"tools": {"t": {"semantics": "IRREVERSIBLE", "compensate": {"handler": "h"}}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        with pytest.raises(PolicyError):
            ToolPolicy.from_dict(bad)


# -- references anywhere in an undo's arguments -----------------------------------------------

released_with: list[dict[str, Any]] = []


@compensator("policy_test.release")
def release(**kwargs: Any) -> None:
    released_with.append(kwargs)


def undo_policy(args: dict[str, Any], semantics: str = "COMPENSABLE") -> ToolPolicy:
    return ToolPolicy.from_dict({"tools": {"book": {
        "semantics": semantics, "compensate": {"handler": "policy_test.release", "args": args}}}})


def rolled_back(spec: Any, forward: Any, args: dict[str, Any]) -> Any:
    """Run ``forward`` as the step ``spec`` with ``args``, then fail: the report of the rollback."""
    released_with.clear()
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        spec.call_sync(forward, (), args)
        raise RuntimeError("later")
    return caught.value.report


def test_a_path_inside_a_list_or_an_object_is_read_from_the_result() -> None:
    args = {"ids": ["$.seats[0].id", "$.seats[1].id"], "note": {"of": "$.order", "why": "rollback"}}
    spec = undo_policy(args).spec_for("book", {})
    assert spec is not None
    result = {"order": "o-1", "seats": [{"id": "12A"}, {"id": "12B"}]}
    report = rolled_back(spec, lambda: result, {})
    assert released_with == [{"ids": ["12A", "12B"], "note": {"of": "o-1", "why": "rollback"}}]
    assert report.clean


def test_each_item_builds_an_array_from_the_result() -> None:
    spec = undo_policy({"ids": "$.seats[*].id", "all": "$.rows[*].seats[*]"}).spec_for("book", {})
    assert spec is not None
    rolled_back(spec, lambda: {"seats": [{"id": "12A"}, {"id": "12B"}], "rows": [{"seats": [1, 2]}, {"seats": [3]}]}, {})
    assert released_with == [{"ids": ["12A", "12B"], "all": [1, 2, 3]}]


def test_the_undo_may_read_the_calls_own_arguments_and_is_then_known_before_the_call() -> None:
    # A tool that answers with a sentence can still be undone: its arguments say what it did.
    policy = undo_policy({"seat": "$args.seat", "flight": "$args['flight no']", "all": "$args"})
    call = {"seat": "12A", "flight no": "LH 400"}
    spec = policy.spec_for("book", call)
    assert spec is not None and spec.options.known_before_call

    def fails_after_booking(**_: Any) -> str:
        raise TimeoutError("the booking may or may not have landed")

    released_with.clear()
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        spec.call_sync(fails_after_booking, (), call)  # UNKNOWN: the undo was built before the call
    assert caught.value.report.compensated
    assert released_with == [{"seat": "12A", "flight": "LH 400", "all": call}]


def test_an_undo_whose_arguments_the_call_lacks_is_refused_before_the_call() -> None:
    policy = undo_policy({"seats": ["$args.seat", "$args.second_seat"]})
    with pytest.raises(StepRefused, match=r"compensate.args\['seats'\]\[1\] = '\$args.second_seat' does not "
                                          r"resolve in the call's arguments") as refused:
        policy.spec_for("book", {"seat": "12A"})
    assert refused.value.rule == "policy.compensate.args"
    with pytest.raises(StepRefused, match="the call's arguments are not known here"):
        policy.spec_for("book")


def test_a_double_dollar_is_a_literal_dollar_and_round_trips() -> None:
    policy = undo_policy({"price": "$$5", "tags": ["$$x", "plain"]})
    spec = policy.spec_for("book", {})
    assert spec is not None and spec.options.known_before_call
    rolled_back(spec, lambda: "booked", {})
    assert released_with == [{"price": "$5", "tags": ["$x", "plain"]}]
    assert ToolPolicy.from_dict(policy.to_dict()) == policy


@pytest.mark.parametrize(("args", "where"), [
    ({"ids": ["$.seats[0].id", "$.seats[x]"]}, r"\['ids'\]\[1\]: cannot read JSON path '\$.seats\[x\]'"),
    ({"n": {"deep": [{"er": "$ id"}]}}, r"\['n'\]\['deep'\]\[0\]\['er'\]: cannot read JSON path '\$ id'"),
    ({"a": "$args..x"}, r"\['a'\]: cannot read JSON path '\$args..x' .* use \$args.field"),
    ({"a": "$5"}, r"\['a'\]: cannot read JSON path '\$5' .*written '\$\$...'"),
])
def test_a_path_that_cannot_be_read_is_refused_at_load_wherever_it_is(args: dict[str, Any], where: str) -> None:
    with pytest.raises(PolicyError, match=r"tools\['book'\].compensate.args" + where):
        undo_policy(args)


def test_a_path_missing_from_a_result_names_where_it_is() -> None:
    spec = undo_policy({"ids": "$.seats[*].id"}).spec_for("book", {})
    assert spec is not None
    with pytest.raises(SagaAborted) as caught, saga_scope(MemoryWAL()):
        spec.call_sync(lambda: {"seats": [{"id": "12A"}, {"no": "id"}]}, (), {})
    assert isinstance(caught.value.cause, CompensationError)
    assert "compensate.args['ids'] = '$.seats[*].id' does not resolve in the forward result" in str(caught.value.cause)


def test_a_flat_policy_writes_the_recipe_it_always_wrote() -> None:
    # The intent records of existing policies are unchanged; only nested references need more.
    undo = undo_policy({"charge_id": "$.charge.id", "reason": "rollback", "seat": "$args.seat"}).spec_for(
        "book", {"seat": "12A"})
    assert undo is not None and isinstance(undo.options.compensate, PolicyUndo)
    assert undo.options.compensate.recipe == {
        "handler": "policy_test.release", "literals": {"reason": "rollback", "seat": "12A"},
        "paths": {"charge_id": "$.charge.id"}}


# An undo's kwargs are checked for secrets (assert_no_secrets): a name like "pwd" is refused by design.
kwarg_names = keys.filter(lambda name: not looks_secret(name))
templates = st.recursive(
    st.none() | st.integers() | st.sampled_from(["$.a", "$.b[*]", "$.c[0].d", "$args.x", "$$lit", "text", "$args"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(kwarg_names, inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(kwarg_names, templates, min_size=1, max_size=4), st.sampled_from(["$lit", "plain", 3]))
def test_recovery_builds_from_the_logged_recipe_exactly_the_undo_the_saga_built(
    args: dict[str, Any], x: Any
) -> None:
    result = {"a": {"k": [1]}, "b": [1, "$2"], "c": [{"d": None}]}
    undo = undo_policy(args).spec_for("book", {"x": x})
    assert undo is not None and isinstance(undo.options.compensate, PolicyUndo)
    factory = undo.options.compensate
    recipe = json.loads(json.dumps(factory.recipe))  # as the log holds it
    assert from_recipe(recipe, result).kwargs == factory(result)["kwargs"]


@given(json_values, st.lists(keys | st.integers(0, 3) | st.just("*"), max_size=4))
def test_each_item_finds_what_a_comprehension_finds(doc: Any, steps: list[Any]) -> None:
    text = "$" + "".join(f"[{s}]" if isinstance(s, int) or s == "*" else f"['{s}']" for s in steps)

    def expected(value: Any, rest: list[Any]) -> Any:
        if not rest:
            return value
        step, more = rest[0], rest[1:]
        if step == "*":
            if not isinstance(value, list):
                raise KeyError(step)
            found = [expected(item, more) for item in value]
            return [x for sub in found for x in sub] if "*" in more else found
        if isinstance(step, int) != isinstance(value, list) or not isinstance(value, (list, dict)):
            raise KeyError(step)
        return expected(value[step], more)

    try:
        want = expected(doc, steps)
    except (KeyError, IndexError):
        with pytest.raises(KeyError):
            JsonPath.parse(text).find(doc)
        return
    assert JsonPath.parse(text).find(doc) == want


@pytest.mark.parametrize("args", [
    {"ids": "$.seats[*].id", "n": ["$.a", {"b": "$args.b"}], "lit": "$$5", "x": "text", "y": 3, "z": None},
    {"all": "$args", "root": "$"},
])
def test_the_published_schema_takes_every_reference_the_loader_takes(args: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    policy = {"tools": {"book": {"semantics": "COMPENSABLE", "compensate": {"handler": "h", "args": args}}}}
    jsonschema.validate(policy, policy_schema())
    ToolPolicy.from_dict(policy)


@pytest.mark.parametrize("args", [{"a": ["$.x[y]"]}, {"a": {"b": "$ id"}}, {"a": "$args..x"}, {"a": "$5"}])
def test_the_published_schema_refuses_every_path_the_loader_refuses(args: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    policy = {"tools": {"book": {"semantics": "COMPENSABLE", "compensate": {"handler": "h", "args": args}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(policy, policy_schema())
    with pytest.raises(PolicyError):
        ToolPolicy.from_dict(policy)
