"""Operation ids are a pure function of (saga, step, tool, direction), byte for byte."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from agent_saga.ids import operation_id, step_keys


def test_operation_id_is_the_documented_digest() -> None:
    # Recovery in another process (or another version) derives the same key: pin the recipe.
    expected = hashlib.sha256(b"s1\x1f3\x1fstripe.charge\x1fforward").hexdigest()[:32]
    assert operation_id("s1", 3, "stripe.charge", "forward") == expected


@given(st.text(max_size=40), st.integers(min_value=0, max_value=10**9), st.text(max_size=40))
def test_step_keys_are_the_forward_and_compensate_operation_ids(saga_id: str, step: int, tool: str) -> None:
    assert step_keys(saga_id, step, tool) == (
        operation_id(saga_id, step, tool, "forward"),
        operation_id(saga_id, step, tool, "compensate"),
    )
