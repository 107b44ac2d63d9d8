"""Signed compensation tokens: what the service signed verifies; any change, or another key, does not."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.distributed import SagaContext, TokenRefused, sign_token, verify_token
from agent_saga.distributed._token import MAX_TOKEN, signer_public
from agent_saga.notekeys import generate_signer

SIGNER, VERIFIER = generate_signer("billing.test/tokens")
KID, PUBLIC = signer_public(SIGNER)
KEYS = {KID: PUBLIC}
CONTEXT = SagaContext("ab" * 16, 3, "cd" * 16)


def test_a_token_verifies_and_says_what_was_signed() -> None:
    token = sign_token(SIGNER, "billing", CONTEXT, "billing.refund", {"order": "o-1", "cents": 1200})
    claims = verify_token(token, KEYS)
    assert (claims.service, claims.context, claims.handler) == ("billing", CONTEXT, "billing.refund")
    assert dict(claims.kwargs) == {"order": "o-1", "cents": 1200} and claims.kid == KID
    assert VERIFIER.startswith(KID + "+")


TOKEN = sign_token(SIGNER, "billing", CONTEXT, "billing.refund", {"order": "o-1"})


@given(st.integers(0, len(TOKEN) - 1), st.characters(codec="ascii"))
def test_any_changed_character_is_refused(position: int, char: str) -> None:
    altered = TOKEN[:position] + char + TOKEN[position + 1:]
    if altered == TOKEN:
        return
    with pytest.raises(TokenRefused) as refused:
        verify_token(altered, KEYS)
    assert "\n" not in str(refused.value)


def test_a_number_json_reads_as_infinity_is_refused_not_raised() -> None:
    # Hypothesis found it: one changed character made a digit run "1e999" (read as inf), and the
    # canonical re-encoding raised ValueError out of verify_token instead of refusing the token.
    altered = _reencode(lambda v: re.sub(rb'"issued":\d+', b'"issued":1e999',
                                         json.dumps(v, sort_keys=True, separators=(",", ":")).encode()))
    with pytest.raises(TokenRefused, match="not canonical"):
        verify_token(altered, KEYS)


def _reencode(mutate: object) -> str:
    version, payload, signature = TOKEN.split(".")
    value = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    raw = mutate(value)  # type: ignore[operator]
    encoded = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return f"{version}.{encoded}.{signature}"


@pytest.mark.parametrize(("mutate", "why"), [
    (lambda v: json.dumps({**v, "kwargs": {"order": "o-2"}}, sort_keys=True, separators=(",", ":")).encode(),
     "signature does not match"),
    (lambda v: json.dumps({**v, "extra": 1}, sort_keys=True, separators=(",", ":")).encode(), "exactly the v1 fields"),
    (lambda v: json.dumps(v, sort_keys=True).encode(), "not canonical"),  # the same value, spaced
    (lambda v: b"[1]", "not a JSON object"),
])
def test_an_altered_payload_is_refused_saying_why(mutate: object, why: str) -> None:
    with pytest.raises(TokenRefused, match=why):
        verify_token(_reencode(mutate), KEYS)


def test_another_key_of_the_same_name_is_not_trusted() -> None:
    other, _ = generate_signer("billing.test/tokens")
    forged = sign_token(other, "billing", CONTEXT, "billing.refund", {"order": "o-1"})
    with pytest.raises(TokenRefused, match="does not trust"):
        verify_token(forged, KEYS)


@pytest.mark.parametrize("value", [None, 1, b"v1.x.y", "", "v2.a.b", "v1.a", "v1.a.b.c", "x" * (MAX_TOKEN + 1)])
def test_what_is_not_a_token_is_refused(value: object) -> None:
    with pytest.raises(TokenRefused):
        verify_token(value, KEYS)


def test_a_token_too_large_is_refused_when_signed() -> None:
    with pytest.raises(ValueError, match="over 8192"):
        sign_token(SIGNER, "billing", CONTEXT, "billing.refund", {"blob": "x" * MAX_TOKEN})
