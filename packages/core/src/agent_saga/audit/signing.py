"""Signed tree heads: an Ed25519-signed checkpoint in the C2SP signed-note format.

A checkpoint (c2sp.org/tlog-checkpoint) is three lines — the log's origin, the tree
size in decimal, the root hash in base64 — and a signed note (c2sp.org/signed-note)
appends a blank line and one line per signature: an em dash, the key name, and
base64 of a 4-byte key id followed by the signature. For Ed25519 the key id is the
first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key). Keys travel as
strings: ``PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`` to sign and
``<name>+<id>+<base64(0x01 || public key)>`` to verify.

Needs ``cryptography`` (``pip install 'agent-saga[encryption]>=3.0.0'``), imported on use.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from agent_saga.notekeys import ed25519, generate_signer, key_id, key_material

__all__ = [
    "Checkpoint",
    "SignatureInvalid",
    "checkpoint_text",
    "generate_signer",
    "sign_checkpoint",
    "verify_checkpoint",
]

_DASH = "\u2014"


class SignatureInvalid(ValueError):
    """A signed note does not carry a valid signature by the expected key."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: str  # hex


def checkpoint_text(origin: str, size: int, root: str | bytes) -> str:
    """The unsigned checkpoint body for a tree of ``size`` leaves with ``root``."""
    if not origin or "\n" in origin:
        raise ValueError(f"origin must be one non-empty line, got {origin!r}")
    if size < 0:
        raise ValueError(f"tree size must be >= 0, got {size}")
    raw = root if isinstance(root, bytes) else bytes.fromhex(root)
    if len(raw) != 32:
        raise ValueError(f"root must be 32 bytes, got {len(raw)}")
    return f"{origin}\n{size}\n{base64.b64encode(raw).decode()}\n"


def _decode_key(parts: list[str], what: str) -> tuple[str, bytes]:
    name, _kid, blob = parts
    return name, key_material(blob, what)


def sign_checkpoint(signer_key: str, origin: str, size: int, root: str | bytes) -> str:
    """The checkpoint as a signed note, signed with ``signer_key`` (from generate_signer)."""
    parts = signer_key.split("+", 4)  # base64 may itself contain "+"
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise ValueError("signer key must read PRIVATE+KEY+<name>+<id>+<key>; make one with generate_signer()")
    name, seed = _decode_key(parts[2:], "signer key")
    ed = ed25519()
    private = ed.Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes_raw()
    text = checkpoint_text(origin, size, root)
    signature = private.sign(text.encode())
    stamp = base64.b64encode(key_id(name, public) + signature).decode()
    return f"{text}\n{_DASH} {name} {stamp}\n"


def verify_checkpoint(note: str, verifier_key: str) -> Checkpoint:
    """The checkpoint a signed note carries, if ``verifier_key`` signed it; else SignatureInvalid."""
    parts = verifier_key.split("+", 2)
    if len(parts) != 3:
        raise ValueError("verifier key must read <name>+<id>+<key>; generate_signer() returns one")
    name, public = _decode_key(parts, "verifier key")
    text, sep, signatures = note.partition("\n\n")
    if not sep or not text:
        raise SignatureInvalid("not a signed note: no blank line between the text and its signatures")
    text += "\n"
    ed = ed25519()
    from cryptography.exceptions import InvalidSignature

    key = ed.Ed25519PublicKey.from_public_bytes(public)
    kid = key_id(name, public)
    for line in signatures.splitlines():
        dash, _, rest = line.partition(" ")
        signer, _, stamp = rest.partition(" ")
        if dash != _DASH or signer != name:
            continue
        try:
            raw = base64.b64decode(stamp, validate=True)
        except (binascii.Error, ValueError):
            continue
        if raw[:4] != kid:
            continue
        try:
            key.verify(raw[4:], text.encode())
        except InvalidSignature:
            raise SignatureInvalid(f"the signature by {name} does not match the checkpoint text") from None
        lines = text.split("\n")
        try:
            origin, size, root_b64 = lines[0], int(lines[1]), lines[2]
            root = base64.b64decode(root_b64, validate=True)
        except (IndexError, ValueError, binascii.Error):
            raise SignatureInvalid("the signed text is not a checkpoint (origin, size, root)") from None
        if len(root) != 32 or str(size) != lines[1]:
            raise SignatureInvalid("the signed text is not a well-formed checkpoint")
        return Checkpoint(origin, size, root.hex())
    raise SignatureInvalid(f"no signature by key {name} ({kid.hex()}) on this note")
