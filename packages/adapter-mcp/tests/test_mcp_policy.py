"""The policy format as MCP extends it, the result document, the skeleton merge, the line splitter."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
from agent_saga_mcp.compat import ToolInfo
from agent_saga_mcp.core import merge_skeleton
from agent_saga_mcp.document import result_document, schema_misses
from agent_saga_mcp.policy import McpPolicy
from agent_saga_mcp.proxy import lines
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import ActionSemantics, MemoryWAL, SagaAborted, saga_scope
from agent_saga.errors import CompensationError, StepRefused
from agent_saga.plugins import PolicyError, ToolPolicy, policy_schema
from agent_saga.plugins.policy import JsonPath

CHARGE = {"semantics": "COMPENSABLE", "compensate": {"tool": "create_refund", "args": {"charge": "$.id"}},
          "policy_args": {"amount": "$.amount"}}


def test_the_shared_schema_accepts_a_compensating_tool_and_refuses_two_undos() -> None:
    schema = policy_schema()
    jsonschema.validate({"mode": "enforce", "tools": {"create_charge": CHARGE}}, schema)
    both = {"tools": {"t": {"semantics": "COMPENSABLE", "compensate": {"tool": "a", "handler": "b"}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(both, schema)
    with pytest.raises(PolicyError, match="both 'handler' and 'tool'"):
        ToolPolicy.from_dict(both)


def test_a_compensating_tool_round_trips_through_the_core_policy() -> None:
    policy = ToolPolicy.from_dict({"mode": "enforce", "tools": {"create_charge": CHARGE}})
    assert policy.to_dict()["tools"]["create_charge"] == CHARGE


def test_in_process_runtimes_refuse_a_tool_undo_before_the_call() -> None:
    policy = ToolPolicy.from_dict({"tools": {"create_charge": CHARGE}})
    with pytest.raises(StepRefused, match="only the MCP proxy"):
        policy.spec_for("create_charge")  # asked before the forward call runs: it never does


def test_the_undo_maps_the_result_document_and_names_a_path_that_does_not_resolve() -> None:
    policy = McpPolicy.load({"tools": {"create_charge": CHARGE}})
    rule = policy.rule_for("create_charge")
    assert rule is not None
    server = "payments"
    result = {"content": [{"type": "text", "text": '{"id": "ch_9"}'}], "isError": False}
    undo = policy.undo("create_charge", rule, {"amount": 5}, server)
    comp = undo(result)
    assert comp is not None and comp.handler == "mcp.call_tool"
    assert dict(comp.kwargs) == {"server": server, "tool": "create_refund", "arguments": {"charge": "ch_9"}}
    assert undo(None) is None  # unknown before the result exists
    with pytest.raises(CompensationError, match=r"compensate.args\['charge'\] = '\$.id' does not resolve"):
        undo({"content": [{"type": "text", "text": "done"}]})


def test_the_policy_builds_the_step_options_the_engine_runs() -> None:
    policy = McpPolicy.load({"tools": {"create_charge": CHARGE, "create_refund": {"semantics": "IRREVERSIBLE"}}})
    charge, refund = policy.rule_for("create_charge"), policy.rule_for("create_refund")
    assert charge is not None and refund is not None

    def undo(result: Any) -> None:
        return None

    options = policy.step_options(charge, undo)
    assert (options.semantics, options.compensate, options.origin) == (ActionSemantics.COMPENSABLE, undo, "mcp")
    assert options.policed({"amount": 5, "c": "x"}) == {"amount": 5, "c": "x"}  # policy_args on top of the call's
    assert policy.step_options(refund, undo).compensate is None  # the rule declares no undo


def test_a_policy_args_path_the_call_lacks_refuses_the_step_on_record() -> None:
    policy = McpPolicy.load({"tools": {"t": {"semantics": "IRREVERSIBLE", "policy_args": {"spent": "$.a.b"}}}})
    rule = policy.rule_for("t")
    assert rule is not None
    options = policy.step_options(rule, lambda result: None)
    assert options.policed({"a": {"b": 3}})["spent"] == 3
    ran: list[str] = []

    async def forward() -> None:
        ran.append("t")

    wal = MemoryWAL()

    async def run() -> None:
        async with saga_scope(wal) as saga:
            await saga.execute(tool="t", forward=forward, args={"a": 3}, options=options)

    with pytest.raises(SagaAborted) as aborted:
        asyncio.run(run())
    assert isinstance(aborted.value.cause, StepRefused) and aborted.value.cause.rule == "policy_args"
    assert ran == []  # refused before it ran
    (refusal,) = [r["body"] for r in wal.records() if r["type"] == "STEP_REFUSED"]
    assert refusal["rule"] == "policy_args" and "$.a.b" in refusal["reason"]


def test_an_unregistered_handler_is_refused_at_load() -> None:
    with pytest.raises(PolicyError, match=r"tools\['t'\].compensate.handler 'nobody.home'"):
        McpPolicy.load({"tools": {"t": {"semantics": "COMPENSABLE", "compensate": {"handler": "nobody.home"}}}})


def test_the_surface_check_reserves_the_explicit_tools_and_warns_about_missing_names() -> None:
    policy = McpPolicy.load({"tools": {"ghost": {"semantics": "REVERSIBLE"}}})
    tools = {"saga_commit": ToolInfo("saga_commit", None, None)}
    with pytest.raises(PolicyError, match="reserves"):
        policy.check_surface(tools, reserved=("saga_commit", "saga_rollback"))
    assert any("ghost" in w for w in policy.check_surface(tools))


@pytest.mark.parametrize(("result", "document"), [
    ({"structuredContent": {"id": 1}, "content": [{"type": "text", "text": "{\"id\": 2}"}]}, {"id": 1}),
    ({"content": [{"type": "text", "text": "{\"id\": 2}"}]}, {"id": 2}),
    ({"content": [{"type": "text", "text": "plain"}]}, {"content": [{"type": "text", "text": "plain"}]}),
    ({"content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}]},
     {"content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}]}),
])
def test_the_result_document(result: dict[str, Any], document: Any) -> None:
    assert result_document(result) == document


@pytest.mark.parametrize(("schema", "path", "misses"), [
    ({"type": "object", "properties": {"amount": {"type": "integer"}}}, "$.amount", False),
    ({"type": "object", "properties": {"amount": {"type": "integer"}}}, "$.amont", True),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, "$.a.b", True),
    ({"type": "object", "additionalProperties": True}, "$.anything", False),
    ({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "object"}}}}, "$.xs[0].id", False),
    ({"type": "object", "properties": {"xs": {"type": "string"}}}, "$.xs[0]", True),
    ({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "object"}}}}, "$.xs[*].id", False),
    ({"type": "object", "properties": {"xs": {"type": "string"}}}, "$.xs[*]", True),
    ({"type": "object", "properties": {"xs": {"type": ["array", "null"]}}}, "$.xs[0]", False),
    ({"type": "object", "properties": {"xs": {"$ref": "#/$defs/s"}}, "$defs": {"s": {"type": "string"}}}, "$.xs[0]",
     True),
    (None, "$.whatever", False),
])
def test_schema_misses(schema: Any, path: str, misses: bool) -> None:
    assert (schema_misses(schema, JsonPath.parse(path)) is not None) == misses


entries = st.sampled_from([
    {"semantics": "REVERSIBLE"},
    {"semantics": "IRREVERSIBLE", "description": "reviewed"},
    CHARGE,
])
tool_names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)


@given(reviewed=st.dictionaries(tool_names, entries, max_size=5), seen=st.lists(tool_names, max_size=8))
def test_merging_a_skeleton_never_touches_or_upgrades_reviewed_entries(reviewed: dict[str, Any],
                                                                       seen: list[str]) -> None:
    existing = {"mode": "enforce", "tools": reviewed}
    merged = merge_skeleton(existing, seen)
    for name, entry in reviewed.items():
        assert merged["tools"][name] == entry
    for name in set(seen) - set(reviewed):
        assert merged["tools"][name]["semantics"] == "IRREVERSIBLE"
        assert "TODO" in merged["tools"][name]["description"]
    assert set(merged["tools"]) == set(reviewed) | set(seen)
    assert merge_skeleton(merged, seen) == merged  # observing the same surface again changes nothing
    ToolPolicy.from_dict(merged)  # and the result is a valid policy


@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=10))
def test_the_line_splitter_matches_split_whatever_the_chunking(data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]

    async def feed() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[bytes]:
        return [line async for line in lines(feed())]

    expected = data.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    assert asyncio.run(collect()) == expected


# -- the types of an undo's arguments, against the undo tool's inputSchema -------------------

NAMES = {"type": "array", "items": {"type": "string"}}
CREATED = {"type": "object", "properties": {
    "entities": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "size": {"type": "integer"}}, "additionalProperties": False}}}}
ASKED = {"type": "object", "properties": {"names": NAMES, "count": {"type": "integer"}}}


def surface(undo_args: dict[str, Any], wants: dict[str, Any], output: Any = CREATED) -> list[str]:
    policy = McpPolicy.load({"tools": {"create": {
        "semantics": "COMPENSABLE", "compensate": {"tool": "delete", "args": {"x": undo_args}}}}})
    tools = {"create": ToolInfo("create", ASKED, output),
             "delete": ToolInfo("delete", {"type": "object", "properties": {"x": wants}}, None)}
    return policy.check_surface(tools)


@pytest.mark.parametrize(("value", "wants", "output", "refused"), [
    ("$.entities[0].name", NAMES, CREATED, "gives a string (per the outputSchema of 'create'), where 'delete' "
                                           "takes an array (build one from every item with [*]"),
    ("$.entities[0].name", NAMES, None, "gives one value, where 'delete' takes an array; build one"),
    ("$.entities[0].name", {"anyOf": [NAMES, {"type": "null"}]}, None, "gives one value"),
    ("$.entities[0].name", {"type": "string"}, None, None),
    ("$.entities[*].name", NAMES, CREATED, None),
    ("$.entities[*].name", NAMES, None, None),
    ("$.entities[*].size", NAMES, CREATED, "builds an array of an integer (per the outputSchema of 'create'), "
                                           "where 'delete' takes an array of a string"),
    ("$.entities[*].name", {"type": "string"}, None, "builds an array ([*]), where 'delete' takes a string"),
    (["$.entities[0].name"], NAMES, CREATED, None),
    (["$.entities[0].size"], NAMES, CREATED, "['x'][0] = '$.entities[0].size' gives an integer"),
    ({"n": "$.entities[0].size"}, {"type": "object", "properties": {"n": {"type": "number"}}}, CREATED, None),
    ({"n": "$.entities[0].name"}, {"type": "object", "properties": {"n": {"type": "number"}}}, CREATED,
     "['x']['n'] = '$.entities[0].name' gives a string"),
    ("$args.count", {"type": "string"}, None, "gives an integer (per the inputSchema of 'create')"),
    ("$args.names", NAMES, None, None),
    ("gone", NAMES, None, "['x'] = 'gone' is a string, where 'delete' takes an array"),
    (1.5, {"type": "integer"}, None, "is a number, where 'delete' takes an integer"),
    (2, {"type": ["number", "null"]}, None, None),
    (["a", 3], {"$ref": "#/properties/x/$defs/list", "$defs": {"list": NAMES}}, None,
     "['x'][1] = 3 is an integer, where 'delete' takes a string"),
    ("$$x", {"type": "string"}, None, None),
])
def test_each_mapped_value_must_fit_the_undo_tools_input_schema(
    value: Any, wants: dict[str, Any], output: Any, refused: str | None
) -> None:
    if refused is None:
        surface(value, wants, output)
        return
    with pytest.raises(PolicyError, match=r"tools\['create'\].compensate.args") as caught:
        surface(value, wants, output)
    assert refused in str(caught.value)


@pytest.mark.parametrize(("value", "refused"), [
    ("$.entities[0].colour", "cannot resolve in 'create''s declared output: $.entities[0].colour: the schema "
                             "has no field 'colour'"),
    ("$args.nmaes[*]", "cannot resolve in 'create''s arguments: $args.nmaes[*]: the schema has no field 'nmaes'"),
])
def test_every_reference_must_be_able_to_resolve_where_it_reads(value: str, refused: str) -> None:
    with pytest.raises(PolicyError) as caught:
        surface([value], {"type": "array"})
    assert f"tools['create'].compensate.args['x'][0] {refused}" in str(caught.value)


def test_undo_arguments_resolve_at_every_depth_from_the_result_and_the_call() -> None:
    policy = McpPolicy.load({"tools": {"create": {"semantics": "COMPENSABLE", "compensate": {"tool": "delete", "args": {
        "names": "$.entities[*].name", "first": ["$.entities[0].name"], "by": {"who": "$args.who"}, "lit": "$$1"}}}}})
    rule = policy.rule_for("create")
    assert rule is not None
    undo = policy.undo("create", rule, {"who": "ada"}, None)
    comp = undo({"structuredContent": {"entities": [{"name": "a"}, {"name": "b"}]}})
    assert comp is not None and comp.kwargs["arguments"] == {
        "names": ["a", "b"], "first": ["a"], "by": {"who": "ada"}, "lit": "$1"}
    with pytest.raises(StepRefused, match=r"compensate.args\['by'\]\['who'\] = '\$args.who' does not resolve"):
        policy.undo("create", rule, {}, None)
