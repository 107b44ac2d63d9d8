from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import ActionSemantics, Compensation, CompensationError, ConfigurationError, compensator
from agent_saga.registry import recoverable, unregister


@pytest.mark.parametrize("text", ["REVERSIBLE", "reversible", "Reversible", " compensable ", "IRREVERSIBLE"])
def test_semantics_accept_names_in_any_case(text: str) -> None:
    assert ActionSemantics.parse(text) is ActionSemantics[text.strip().upper()]


@given(st.text().filter(lambda s: s.strip().upper() not in ActionSemantics.__members__))
def test_anything_else_is_a_clear_error(text: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown semantics") as info:
        ActionSemantics.parse(text)
    assert "REVERSIBLE, COMPENSABLE, IRREVERSIBLE" in str(info.value)


def test_non_string_semantics_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown semantics 3"):
        ActionSemantics.parse(3)  # type: ignore[arg-type]


def test_only_reversible_skips_the_disk() -> None:
    assert [s.durable for s in ActionSemantics] == [False, True, True]


def test_compensation_needs_fn_or_handler() -> None:
    with pytest.raises(CompensationError, match="neither"):
        Compensation()


def test_compensation_fn_must_be_callable() -> None:
    with pytest.raises(CompensationError, match="callable"):
        Compensation(fn=42)  # type: ignore[arg-type]


def test_handler_backed_compensation_refuses_non_json_kwargs() -> None:
    with pytest.raises(CompensationError, match="JSON round trip") as info:
        Compensation(fn=print, handler="x.undo", kwargs={"client": object()})
    assert "credential reference" in str(info.value)


def test_recoverable_only_with_a_registered_handler_and_json_kwargs() -> None:
    @compensator("sem.undo")
    def undo(order_id: str) -> None: ...

    try:
        assert recoverable(Compensation(fn=undo, handler="sem.undo", kwargs={"order_id": "o1"}))
        assert not recoverable(Compensation(fn=undo, kwargs={"order_id": "o1"}))  # closure-style
        assert not recoverable(Compensation(handler="sem.unknown", kwargs={}))  # not registered
        # a tuple is not JSON-stable (it comes back as a list), so such kwargs are refused
        with pytest.raises(CompensationError):
            Compensation(fn=undo, handler="sem.undo", kwargs={"ids": (1, 2)})
        assert not recoverable(Compensation(fn=undo, kwargs={"ids": (1, 2)}))
    finally:
        unregister("sem.undo")


def test_label_describes_the_undo() -> None:
    assert Compensation(fn=print, kwargs={"a": 1}).label == "print(a=1)"
    assert Compensation(fn=print, description="refund ch_1").label == "refund ch_1"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.tuples(st.integers()),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5) | st.integers(), children, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_json_roundtrips_agrees_with_json_itself(value: object) -> None:
    import json

    try:
        expected = json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError):
        expected = False
    from agent_saga.semantics import json_roundtrips

    assert json_roundtrips(value) is expected
