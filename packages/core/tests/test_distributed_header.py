"""The saga-context header: one fixed format, and a strict parser that refuses everything else."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agent_saga.distributed import SagaContext, SagaContextRefused, parse_saga_context
from agent_saga.distributed._header import LENGTH, saga_hex

HEX = "0123456789abcdef"
VALID = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{32}")
WHY = "|".join([
    r"it is \d+ (bytes|characters) long",
    r"it is not ASCII",
    r"its fields are not lowercase hex separated by '-'",
    r"version [0-9a-f]{2} is not 00, the only version this library reads",
    r"step 00000000 does not exist \(steps are numbered from 1\)",
])
REFUSAL = re.compile(
    rf"saga-context header refused: ({WHY}); the format is "
    r"00-<saga: 32 hex>-<step: 8 hex>-<key: 32 hex> \(77 characters\)"
)
contexts = st.builds(
    SagaContext,
    st.text(HEX, min_size=32, max_size=32),
    st.integers(1, 0xFFFFFFFF),
    st.text(HEX, min_size=32, max_size=32),
)


@given(contexts)
def test_a_context_survives_the_header(context: SagaContext) -> None:
    value = context.header()
    assert len(value) == LENGTH and VALID.fullmatch(value)
    assert parse_saga_context(value) == context
    assert parse_saga_context(value.encode()) == context


def _hostile() -> st.SearchStrategy[str]:
    valid = contexts.map(SagaContext.header)

    def mutate(value: str, data: st.DataObject) -> str:
        i = data.draw(st.integers(0, len(value) - 1))
        kind = data.draw(st.sampled_from(["replace", "insert", "delete", "pad", "upper"]))
        if kind == "replace":
            return value[:i] + data.draw(st.characters()) + value[i + 1:]
        if kind == "insert":
            return value[:i] + data.draw(st.characters()) + value[i:]
        if kind == "delete":
            return value[:i] + value[i + 1:]
        if kind == "pad":
            return data.draw(st.sampled_from([" ", "\t", "\r\n", "\x00"])) + value
        return value.upper()

    mutated = st.builds(lambda v, d: (v, d), valid, st.data())
    return st.one_of(
        st.text(max_size=200),
        st.text(alphabet=HEX + "-", min_size=LENGTH, max_size=LENGTH),
        mutated.map(lambda pair: mutate(*pair)),
    )


@given(st.data())
def test_anything_but_the_format_is_refused_in_one_line_that_does_not_echo_it(data: st.DataObject) -> None:
    value = data.draw(_hostile())
    valid = VALID.fullmatch(value) is not None and value[38:46] != "00000000"
    assume(not valid)
    for given_value in (value, value.encode("utf-8", "surrogatepass")):
        with pytest.raises(SagaContextRefused) as refused:
            parse_saga_context(given_value)
        message = str(refused.value)
        # One of the parser's fixed sentences, which hold at most two characters of the value (the
        # version): never an echo. Not `value not in message`: Hypothesis draws the library's own
        # short constants as text, and "saga-context" (HEADER) is in every such message.
        assert REFUSAL.fullmatch(message), message


@given(st.binary(max_size=120))
def test_arbitrary_bytes_are_parsed_or_refused_never_anything_else(raw: bytes) -> None:
    try:
        context = parse_saga_context(raw)
    except SagaContextRefused:
        return
    assert context.header().encode() == raw


@pytest.mark.parametrize(("value", "why"), [
    ("01-" + "a" * 32 + "-00000001-" + "b" * 32, "version 01"),
    ("00-" + "a" * 32 + "-00000000-" + "b" * 32, "step 00000000"),
    ("00-" + "A" * 32 + "-00000001-" + "b" * 32, "lowercase hex"),
    (" 00-" + "a" * 32 + "-00000001-" + "b" * 31, "lowercase hex"),
    ("00-" + "a" * 32 + "-00000001-" + "b" * 32 + "\n", "78 characters"),
    ("00-" + "a" * 32 + "-0000000١-" + "b" * 32, "not ASCII"),  # an Arabic-Indic digit one
])
def test_named_hostile_values_say_which_rule_they_broke(value: str, why: str) -> None:
    with pytest.raises(SagaContextRefused, match=why):
        parse_saga_context(value)


def test_the_header_never_carries_the_callers_free_text() -> None:
    assert saga_hex("a" * 32) == "a" * 32
    named = saga_hex("nightly run for ACME\n")
    assert re.fullmatch(r"[0-9a-f]{32}", named) and named == saga_hex("nightly run for ACME\n")
