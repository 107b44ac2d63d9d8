"""The declarative tool policy: validation names the entry; paths resolve; nothing is guessed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import ActionSemantics, CompensationError, MemoryWAL, SagaAborted, compensator, saga_scope
from agent_saga.plugins import PolicyError, ToolPolicy, policy_schema
from agent_saga.plugins.policy import JsonPath

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
