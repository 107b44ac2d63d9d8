"""Secret-looking argument names are redacted; look-alikes and references are not."""

from __future__ import annotations

from contextlib import nullcontext
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.credentials import CredentialError, assert_no_secrets, plain_and_clean
from agent_saga.errors import CompensationError
from agent_saga.redaction import REDACTED, looks_secret, redact_args
from agent_saga.semantics import Compensation, json_roundtrips


@pytest.mark.parametrize(
    "name",
    ["api_key", "apiKey", "X-Api-Key", "password", "db_password", "auth_token", "token", "secret",
     "client_secret", "Authorization", "private_key", "aws_access_key_id", "refresh_token", "auth",
     "session_id", "cookie", "stripeSecretKey",
     # issue 25, item 8: names the word-by-word match did not know
     "pass", "db_pass", "PWD", "passwd", "Set-Cookie", "api-key", "apikey", "x-api-key", "accessToken",
     "secretKey", "access_key", "clientSecret"],
)
def test_secret_names_are_recognised(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name",
    ["amount", "max_tokens", "tokenizer", "credential_ref", "api_key_ref", "author", "customer_id",
     "key", "keyword", "authority", "secretary_name_ref", "passenger"],
)
def test_look_alikes_and_references_stay_visible(name: str) -> None:
    assert not looks_secret(name)


def test_redaction_is_marked_nested_and_honours_reveal() -> None:
    args = {"amount": 42, "api_key": "sk_live_1", "headers": {"Authorization": "Bearer x", "Accept": "json"}}
    assert redact_args(args) == {
        "amount": 42, "api_key": REDACTED, "headers": {"Authorization": REDACTED, "Accept": "json"},
    }
    assert redact_args(args, reveal={"api_key"})["api_key"] == "sk_live_1"
    assert args["api_key"] == "sk_live_1"  # the caller's mapping is not changed


@given(st.dictionaries(st.text(max_size=20), st.integers() | st.text(max_size=5), max_size=8))
def test_redaction_keeps_every_name_and_only_changes_secret_values(args: dict[str, object]) -> None:
    out = redact_args(args)
    assert list(out) == list(args)
    for name, value in args.items():
        assert out[name] == (REDACTED if looks_secret(name) else value)


secretish_names = st.sampled_from(["api_key", "apiKey", "password", "token", "auth", "amount", "id", "key_ref", "x"])
secretish_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["", "sk_live_12345678abc", "AKIA0123456789ABCDEF", "Bearer abcdefgh12", "ch_1"]),
)


@given(st.dictionaries(secretish_names | st.text(max_size=8), secretish_values, max_size=5))
def test_the_quick_check_of_flat_kwargs_never_passes_what_the_full_walk_refuses(kwargs: dict[str, object]) -> None:
    """Compensation kwargs are checked for secrets on every step; flat ones take a fast path."""
    try:
        assert_no_secrets({"nested": kwargs})  # not flat: always the full walk
        refused = False
    except CredentialError:
        refused = True
    with pytest.raises(CredentialError) if refused else nullcontext():
        assert_no_secrets(kwargs)


flat_kwargs = st.dictionaries(
    secretish_names | st.text(max_size=8) | st.integers(),
    secretish_values | st.tuples(st.integers()) | st.just(float("nan")) | st.just(float("inf")),
    max_size=5,
)


def _full_checks(kwargs: dict[object, object], where: str) -> str | None:
    """The error the full checks give (the secret walk, then the JSON round trip), or None."""
    try:
        assert_no_secrets(MappingProxyType(kwargs), where=where)  # not a dict: never the fast path
    except CredentialError as err:
        return str(err)
    return None if json_roundtrips(kwargs, values=False) else "JSON round trip"


@given(flat_kwargs)
def test_a_compensation_refuses_exactly_what_the_full_checks_refuse(kwargs: dict[object, object]) -> None:
    """Flat kwargs skip both walks on every step; the short cut never passes what a walk refuses."""
    expected = _full_checks(kwargs, "kwargs of compensation handler 'x.undo'")
    if plain_and_clean(kwargs):
        assert expected is None
    try:
        Compensation(fn=print, handler="x.undo", kwargs=kwargs)
        got = None
    except CredentialError as err:
        got = str(err)
    except CompensationError as err:
        got = "JSON round trip" if "JSON round trip" in str(err) else str(err)
    assert got == expected
