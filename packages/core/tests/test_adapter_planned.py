"""The adapter kit's one place for a framework's planned tool calls: ``Adapter.planned`` / ``steps``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gadgets import Gadget, Gadgets
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.runtime._speculation_leases import args_digest

adapter = Gadgets()


class Shelf:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lookup = adapter.wrap_tool(Gadget("lookup", self._lookup), semantics="REVERSIBLE")

    def _lookup(self, q: Any = None) -> Any:
        self.calls.append(q)
        return q


def never_read() -> Iterator[tuple[str, Any]]:
    raise AssertionError("the calls were read although nothing speculates")
    yield  # pragma: no cover


def test_with_no_speculator_the_calls_are_not_even_read() -> None:
    assert adapter.planned(never_read()) == []  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        assert adapter.planned(never_read()) == []


def test_json_text_and_mappings_are_planned_and_what_is_no_call_is_skipped() -> None:
    shelf, wal = Shelf(), MemoryWAL()
    with saga_scope(wal=wal), Speculator(adapter.steps([shelf.lookup]), intent="t") as ahead:
        leases = adapter.planned([
            ("lookup", {"q": 1}),
            ("lookup", '{"q": 2}'),
            ("lookup", b'{"q": 3}'),
            ("lookup", ""),  # no arguments at all: an empty object
            ("lookup", "{not json"),  # the model's JSON did not parse: no call to guess
            ("lookup", "[1, 2]"),  # not an object: no call to guess
            ("lookup", 7),
            ("nothing-wrapped", {"q": 4}),  # refused by the speculator: not one of its tools
        ])
        assert [lease.tool for lease in leases] == ["lookup"] * 4
        assert [shelf.lookup.fn(q=i) for i in (1, 2, 3)] == [1, 2, 3]
        assert shelf.lookup.fn() is None
    assert sorted(shelf.calls, key=str) == [1, 2, 3, None]  # each body once: four guesses, all redeemed
    assert ahead.stats.redeemed == 4 and ahead.stats.refused == 1
    assert len([r for r in wal.records() if r["type"] == "SPECULATION_REDEEMED"]) == 4


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3), max_leaves=6
)


@settings(max_examples=examples(40))
@given(json_values)
def test_the_models_json_text_plans_the_very_call_its_mapping_plans(value: Any) -> None:
    shelf = Shelf()
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps([shelf.lookup]), intent="t") as ahead:
        (lease,) = adapter.planned([("lookup", json.dumps({"q": value}))])
        assert lease.args_digest == args_digest({"q": value})
        assert shelf.lookup.fn(q=value) == value  # the agent's own call takes the held result
    assert shelf.calls == [value] and ahead.stats.redeemed == 1


def test_steps_refuses_what_wrap_tool_did_not_make() -> None:
    with pytest.raises(TypeError, match=r"takes tools from its wrap_tool .* got .*Gadget: wrap it first"):
        adapter.steps([Gadget("raw", lambda: None)])
    with pytest.raises(TypeError, match=r"got builtins\.str"):
        adapter.steps(["lookup"])
