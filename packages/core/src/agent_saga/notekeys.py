"""Ed25519 keys as strings, in the C2SP signed-note key format (c2sp.org/signed-note).

``PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`` signs; ``<name>+<id>+<base64(0x01 ||
public key)>`` verifies; the id is the first 4 bytes of SHA-256(name || 0x0A || 0x01 ||
public key). Signed checkpoints (``audit.signing``) and signed approval decisions
(``approvals._authority``) both use these keys, so the format lives here, once, below both;
so does :func:`read_host_list`, the one reader of the host's trust lists (approver keys,
operator keys, passkeys), which the log's attestation check needs as much as approvals do;
and :func:`approver_name`, the rule for the name a key is held by, which an operator's repair
(``recovery``) applies as much as an approval does.
Needs ``cryptography``, imported on use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.install import pip_install

__all__ = [
    "ANONYMOUS", "ED25519", "approver_name", "check_name", "ed25519", "generate_signer", "key_id", "key_material",
    "read_host_list", "verifier_keys",
]

#: The signature-type byte of an Ed25519 key in this format.
ED25519 = b"\x01"


def ed25519(extra: str = "encryption") -> Any:
    """``cryptography``'s Ed25519 module; ImportError naming ``agent-saga[extra]`` when it is missing."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519 as module
    except ImportError as err:
        raise ImportError(f"Ed25519 keys need 'cryptography': {pip_install('agent-saga', extra)}") from err
    return module


def check_name(name: str) -> None:
    if not name or any(c.isspace() for c in name) or "+" in name:
        raise ValueError(f"key name {name!r} must be non-empty, without spaces or '+' (e.g. 'example.com/audit')")


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public).digest()[:4]


def generate_signer(name: str, extra: str = "encryption") -> tuple[str, str]:
    """A fresh key pair as (signer key, verifier key) strings. Keep the first secret."""
    check_name(name)
    seed = os.urandom(32)
    public = ed25519(extra).Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    kid = key_id(name, public).hex()
    return (
        f"PRIVATE+KEY+{name}+{kid}+{base64.b64encode(ED25519 + seed).decode()}",
        f"{name}+{kid}+{base64.b64encode(ED25519 + public).decode()}",
    )


def key_material(blob: str, what: str) -> bytes:
    """The 32 key bytes of a key's last field; ValueError naming ``what`` when it is not one."""
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: the key material is not base64") from None
    if len(raw) != 33 or raw[:1] != ED25519:
        raise ValueError(f"{what}: not an Ed25519 key (0x01 followed by 32 bytes)")
    return raw[1:]


def verifier_keys(lines: Iterable[str], location: str) -> dict[str, bytes]:
    """``<name>+<id>`` -> public key bytes, from ``<name>+<id>+<base64>`` lines (blank and ``#`` lines skipped).

    ValueError naming ``location`` and the line when one is not a verifier key. Both lists of
    trusted keys (approvers', operators') have this format; each decides what a bad list means.
    """
    keys: dict[str, bytes] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split("+", 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{location} line {number}: not a verifier key (<name>+<id>+<key>)")
        keys[f"{parts[0]}+{parts[1]}"] = key_material(parts[2], f"{location} line {number}")
    return keys


def read_host_list(file: Path, what: str) -> str | None:
    """The text of one of the host's trust lists (approver keys, operator keys, passkeys); None if absent.

    ValueError when the list cannot be read, or when group or others may write it or its
    directory (a sticky directory excepted): whoever can add a line to it is trusted.
    """
    try:
        text = file.read_text(encoding="utf-8")
        modes = [(place, place.stat().st_mode) for place in (file, file.parent)]
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {what} {file}: {err}") from None
    for place, mode in modes:
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (place.is_dir() and mode & stat.S_ISVTX):
            raise ValueError(
                f"{what} {file} are refused: {place} is writable by group or others "
                f"(mode {stat.S_IMODE(mode):o}), so anyone could add to them; chmod go-w {place}"
            )
    return text


ANONYMOUS = (
    "a decision needs a named approver (--approver WHO): an anonymous approval proves nothing "
    "about who let the action through, and proving that is the only thing the record is for"
)
_HIDDEN = ("Cc", "Cf")  # control and format characters: zero-width spaces and joiners, BOMs, bidi overrides


def approver_name(value: object) -> str:
    """``value`` as an approver's name; ConfigurationError if it is blank or hides characters.

    Blank includes whitespace and invisible characters only (U+200B..U+200D,
    U+2060, U+FEFF...): a name nobody can read names nobody. A name with such a
    character inside it is refused too, since it reads as someone it is not.
    """
    if not isinstance(value, str) or not any(
        not c.isspace() and unicodedata.category(c) not in _HIDDEN for c in value
    ):
        raise ConfigurationError(ANONYMOUS)
    name = value.strip()
    hidden = sorted({f"U+{ord(c):04X}" for c in name if unicodedata.category(c) in _HIDDEN})
    if hidden:
        raise ConfigurationError(
            f"approver {name!r} contains invisible or control characters ({', '.join(hidden)}): "
            "give the name exactly as people read it"
        )
    return name
