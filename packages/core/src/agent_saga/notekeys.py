"""Ed25519 keys as strings, in the C2SP signed-note key format (c2sp.org/signed-note).

``PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`` signs; ``<name>+<id>+<base64(0x01 ||
public key)>`` verifies; the id is the first 4 bytes of SHA-256(name || 0x0A || 0x01 ||
public key). Signed checkpoints (``audit.signing``) and signed approval decisions
(``approvals._authority``) both use these keys, so the format lives here, once, below both;
so does :func:`read_host_list`, the one reader of the host's trust lists (approver keys,
operator keys, passkeys, the MCP servers) with their one rule, which the log's attestation
check needs as much as approvals do;
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
    "ANONYMOUS",
    "ED25519",
    "approver_name",
    "check_name",
    "ed25519",
    "generate_signer",
    "host_list_lines",
    "key_id",
    "key_material",
    "read_host_list",
    "verifier_keys",
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
    """The text of one of the host's trust lists (approver keys, operator keys, passkeys, MCP servers); None if absent.

    One rule for every list, whoever reads it: the list, its directory and every directory
    above are owned by root or by the reading user; the list and its directory are writable
    by nobody else, a sticky directory included (there anyone may create the list while it
    is absent). A symlink counts as the file it leads to: that file and the directories of
    every link on the way are held to the same rule. ConfigurationError (a ValueError) naming the
    place and the fix otherwise, or when the list cannot be read: whoever can change a list is
    trusted by it.
    """
    me = os.geteuid()
    try:
        target, holders = _followed(file)
        own = {holders[0], *holders[0].parents}
        linked = f" (where {file} leads)"
        for holder in holders:
            for place in (holder, *holder.parents):
                _kept(place, os.stat(place), file, what, me, strict=place == holder,
                      via="" if place in own else linked)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigurationError(f"cannot read {what} {file}: {err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigurationError(f"{what} {file} are refused: {target} is not a regular file")
        _kept(target, info, file, what, me, strict=True, via=linked if len(holders) > 1 else "")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read()
    except OSError as err:
        raise ConfigurationError(f"cannot read {what} {file}: {err}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigurationError(f"cannot read {what} {file}: {err}") from None


def host_list_lines(file: Path, what: str) -> list[str]:
    """The lines of the host's trust list ``file`` (none when it is absent), held to :func:`read_host_list`'s rule."""
    text = read_host_list(file, what)
    return [] if text is None else text.splitlines()


_MAX_LINKS = 40  # as the kernel's own limit on a path's symlinks (ELOOP)


def _followed(file: Path) -> tuple[Path, list[Path]]:
    """Where ``file`` leads after every symlink, and each directory holding a link on the way or the file.

    FileNotFoundError when the file (or a link's target) does not exist.
    """
    path = Path(os.path.abspath(file))
    holders: list[Path] = []
    for _ in range(_MAX_LINKS):
        parent = Path(os.path.realpath(path.parent))
        path = parent / path.name
        holders.append(parent)
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return path, holders
        path = parent / os.readlink(path)
    raise OSError(f"more than {_MAX_LINKS} symlinks")


def _kept(place: Path, info: os.stat_result, file: Path, what: str, me: int, *, strict: bool, via: str) -> None:
    """Refuse ``place`` unless root or ``me`` owns it and nobody else may write it.

    A directory above the list's own may be sticky (like /tmp): there nobody but its owner and
    root can move an entry owned by root or by the reader, and that entry is checked too.
    """
    if info.st_uid not in (0, me):
        raise ConfigurationError(
            f"{what} {file} are refused: {place} is owned by uid {info.st_uid}, not by root or by this user "
            f"(uid {me}), so its owner could change them{via}; chown root {place}"
        )
    mode = info.st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and (strict or not mode & stat.S_ISVTX):
        raise ConfigurationError(
            f"{what} {file} are refused: {place} is writable by group or others "
            f"(mode {stat.S_IMODE(mode):o}), so anyone could add to them{via}; chmod go-w {place}"
        )


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
