"""The signed compensation token: a service's promise of how to undo what it did for one key.

A service returns it in the ``saga-compensation`` response header; the caller logs it with
the step and hands it back, unchanged, to the service's compensation endpoint. Wire form::

    v1.<base64url(payload)>.<base64url(signature)>       (no padding, at most 8192 characters)

``payload`` is the canonical JSON (sorted keys, no spaces) of exactly these fields:

* ``v`` 1; ``service`` the service's name; ``kid`` the signing key (``<name>+<id>``);
* ``saga``, ``step``, ``key`` — the ``saga-context`` the request carried;
* ``handler`` and ``kwargs`` — the registered undo and its JSON arguments;
* ``issued`` — seconds since the epoch when it was signed (for people; nothing expires).

The signature is Ed25519 over ``agent-saga compensation token v1\\n`` followed by the payload
bytes. Keys are the signed-note key strings of :mod:`agent_saga.notekeys` (the same as
approvals' and attestations'). A token that is not exactly this (a field more or less,
another type, non-canonical JSON, a bad signature, a key not trusted) is refused with one
line saying why, never echoing it.

A **compensation receipt** is the service's signed answer that it undid what one token
names: the same wire form, under ``agent-saga compensation receipt v1\n``, over exactly
``v`` 1, ``service``, ``kid``, ``key`` (the step's key), ``state`` ``"compensated"`` and
``token_sha256`` (the hex SHA-256 of the token's text). It is signed with the token key, so
only the holder of that key can say "compensated" for that token; the caller believes an
undo done only with a receipt for the very token it sent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.distributed._header import SagaContext
from agent_saga.inert import inert
from agent_saga.notekeys import ed25519, key_id, key_material, verifier_keys

__all__ = [
    "MAX_TOKEN",
    "TOKEN_HEADER",
    "CompensationToken",
    "ReceiptRefused",
    "TokenRefused",
    "sign_receipt",
    "sign_token",
    "signer_public",
    "token_digest",
    "trusted_keys",
    "verify_receipt",
    "verify_token",
]

TOKEN_HEADER = "saga-compensation"
MAX_TOKEN = 8192
_DOMAIN = b"agent-saga compensation token v1\n"
_FIELDS = frozenset({"v", "service", "kid", "saga", "step", "key", "handler", "kwargs", "issued"})
_RECEIPT_DOMAIN = b"agent-saga compensation receipt v1\n"
_RECEIPT_FIELDS = frozenset({"v", "service", "kid", "key", "state", "token_sha256"})


class TokenRefused(ValueError):
    """A compensation token that does not verify; the message says why in one line."""


class ReceiptRefused(TokenRefused):
    """A compensation receipt that does not prove the undo of the token it is asked about (one line)."""


@dataclass(frozen=True, slots=True)
class CompensationToken:
    """What a verified token says."""

    service: str
    kid: str
    context: SagaContext
    handler: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    issued: int = 0


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class _Kind:
    """What is being checked: a token or a receipt (its domain, fields, error and wording)."""

    def __init__(self, noun: str, domain: bytes, fields: frozenset[str], error: type[TokenRefused]) -> None:
        self.noun, self.domain, self.fields, self.error = noun, domain, fields, error

    def refuse(self, why: str) -> TokenRefused:
        return self.error(f"compensation {self.noun} refused: {why}")


_TOKEN = _Kind("token", _DOMAIN, _FIELDS, TokenRefused)
_RECEIPT = _Kind("receipt", _RECEIPT_DOMAIN, _RECEIPT_FIELDS, ReceiptRefused)


def _unb64(text: str, what: str, kind: _Kind) -> bytes:
    if not text or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in text):
        raise kind.refuse(f"its {what} is not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise kind.refuse(f"its {what} is not unpadded base64url") from None
    if _b64(raw) != text:  # one encoding per value: no trailing bits to play with
        raise kind.refuse(f"its {what} is not canonical base64url")
    return raw


def _signer(signer_key: str) -> tuple[str, bytes]:
    parts = signer_key.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise ValueError("a service's signing key reads PRIVATE+KEY+<name>+<id>+<key>; make one with generate_signer()")
    return f"{parts[2]}+{parts[3]}", key_material(parts[4], "the service's signing key")


def signer_public(signer_key: str) -> tuple[str, bytes]:
    """The ``<name>+<id>`` and public key bytes of a signing key."""
    kid, seed = _signer(signer_key)
    public = ed25519("http").Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    name = kid.split("+", 1)[0]
    if key_id(name, public).hex() != kid.split("+", 1)[1]:
        raise ValueError("the service's signing key's id does not match its key material")
    return kid, public


def trusted_keys(keys: Iterable[str], location: str) -> dict[str, bytes]:
    """``<name>+<id>`` -> public key, from verifier key strings (``<name>+<id>+<base64>``)."""
    return verifier_keys(keys, location)


def sign_token(signer_key: str, service: str, context: SagaContext, handler: str, kwargs: Mapping[str, Any]) -> str:
    """The token for the undo ``handler(**kwargs)`` of what ``service`` did for ``context``."""
    kid, seed = _signer(signer_key)
    payload = _canonical({
        "v": 1, "service": service, "kid": kid, "saga": context.saga, "step": context.step, "key": context.key,
        "handler": handler, "kwargs": dict(kwargs), "issued": int(time.time()),
    })
    token = _sealed(seed, _DOMAIN, payload)
    if len(token) > MAX_TOKEN:
        raise ValueError(
            f"the compensation token for {handler!r} would be {len(token)} characters, over {MAX_TOKEN}: "
            "keep the undo's kwargs to identifiers (the service can look the rest up by them)"
        )
    return token


def _sealed(seed: bytes, domain: bytes, payload: bytes) -> str:
    signature = ed25519("http").Ed25519PrivateKey.from_private_bytes(seed).sign(domain + payload)
    return f"v1.{_b64(payload)}.{_b64(signature)}"


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token's text: what a receipt and a refusal name it by."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def sign_receipt(signer_key: str, service: str, key: str, token: str) -> str:
    """``service``'s receipt that the undo ``token`` names (for the step's ``key``) is done."""
    kid, seed = _signer(signer_key)
    payload = _canonical({
        "v": 1, "service": service, "kid": kid, "key": key, "state": "compensated", "token_sha256": token_digest(token),
    })
    return _sealed(seed, _RECEIPT_DOMAIN, payload)


def verify_receipt(receipt: object, keys: Mapping[str, bytes], *, service: str, token: str) -> None:
    """Raise :class:`ReceiptRefused` unless one of ``keys`` signed ``service``'s receipt for exactly ``token``."""
    if receipt is None:
        raise _RECEIPT.refuse("there is none (a service that undid it signs one with its token key)")
    value = _verified(receipt, keys, _RECEIPT)
    if value["service"] != service:
        raise _RECEIPT.refuse(f"it is {inert(str(value['service']))!r}'s, not {service!r}'s")
    if value["state"] != "compensated" or value["v"] != 1 or type(value["v"]) is not int:
        raise _RECEIPT.refuse("it does not say compensated")
    if value["token_sha256"] != token_digest(token):
        raise _RECEIPT.refuse("it is for another token")


def _payload(raw: bytes, kind: _Kind) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("ascii"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError):
        raise kind.refuse("its payload is not ASCII JSON") from None
    if not isinstance(value, dict):
        raise kind.refuse("its payload is not a JSON object")
    if set(value) != kind.fields:
        raise kind.refuse("its payload does not have exactly the v1 fields")
    try:
        canonical = _canonical(value)
    except ValueError:  # a number JSON reads as infinity (1e999): no canonical form, never signed
        raise kind.refuse("its payload is not canonical JSON") from None
    if canonical != raw:
        raise kind.refuse("its payload is not canonical JSON")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def verify_token(token: object, keys: Mapping[str, bytes]) -> CompensationToken:
    """What ``token`` says, if one of ``keys`` (``<name>+<id>`` -> public key) signed exactly it.

    Raises :class:`TokenRefused`; the caller checks that the token is for the service and
    the key it expects (:attr:`CompensationToken.service`, ``.context``).
    """
    return _claims(_verified(token, keys, _TOKEN))


def _verified(text: object, keys: Mapping[str, bytes], kind: _Kind) -> dict[str, Any]:
    """The payload of ``text`` (a token or a receipt), if one of ``keys`` signed exactly it."""
    if not isinstance(text, str):
        raise kind.refuse(f"it is a {type(text).__name__}, not text")
    if len(text) > MAX_TOKEN:
        raise kind.refuse(f"it is {len(text)} characters, over {MAX_TOKEN}")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != "v1":
        raise kind.refuse("it is not v1.<payload>.<signature>")
    raw = _unb64(parts[1], "payload", kind)
    signature = _unb64(parts[2], "signature", kind)
    value = _payload(raw, kind)
    kid = value["kid"]
    public = keys.get(kid) if isinstance(kid, str) else None
    if public is None:
        raise kind.refuse("it is signed by a key this side does not trust")
    from cryptography.exceptions import InvalidSignature

    try:
        ed25519("http").Ed25519PublicKey.from_public_bytes(public).verify(signature, kind.domain + raw)
    except InvalidSignature:
        raise kind.refuse("its signature does not match its contents") from None
    return value


def _claims(value: dict[str, Any]) -> CompensationToken:
    checks = (
        ("v", value["v"] == 1 and type(value["v"]) is int),
        ("service", isinstance(value["service"], str) and bool(value["service"])),
        ("kid", isinstance(value["kid"], str)),
        ("handler", isinstance(value["handler"], str) and bool(value["handler"])),
        ("kwargs", isinstance(value["kwargs"], dict)),
        ("issued", type(value["issued"]) is int and value["issued"] >= 0),
        ("step", type(value["step"]) is int),
    )
    for name, ok in checks:
        if not ok:
            raise TokenRefused(f"compensation token refused: its field {name!r} has the wrong type or value")
    try:
        context = SagaContext(value["saga"], value["step"], value["key"])
    except ValueError:
        raise TokenRefused("compensation token refused: its saga, step or key is not a saga-context") from None
    return CompensationToken(value["service"], value["kid"], context, value["handler"], value["kwargs"],
                             value["issued"])
