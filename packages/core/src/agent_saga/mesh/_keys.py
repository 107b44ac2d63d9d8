"""Device keys: a hub merges a device's records only up to the last head the device's own key signed.

A device is the hash of its log's first record, and anyone holding a copy of that log can
rebuild its chain and append to it: a name, not a proof. So a device *enrols* by writing that
first record itself (``enrol``, ``agent-saga mesh enrol``): a DEVICE_HEAD naming its public key,
signed by it. The device's id then commits to its key, and no other key can speak for it. At
each sync (``sign_head``, ``agent-saga mesh sign``) the device appends a DEVICE_HEAD signed by
that key; the signature covers the record's seq and ``prev`` (``agent_saga.log.attestation``),
and ``prev`` is the hash of everything before it, so one signature vouches for the whole chain
up to it.

A hub trusts device keys as it trusts operator keys: through a host list,
``/etc/agent-saga/device-keys`` (``device_keys_path``; read by ``notekeys.read_host_list``, the
one rule of every host list). Keys are the approvers' format: ``agent-saga approvals keygen``
makes one, ``agent-saga approvals trust KEY --trusted-keys /etc/agent-saga/device-keys`` (as
root) trusts it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.inert import inert
from agent_saga.log.attestation import OperatorKey, OperatorKeys, host_list_path
from agent_saga.log.file import read_records
from agent_saga.log.fs import private_dir, write_new
from agent_saga.log.maintenance import append_signed
from agent_saga.log.records import Record, RecordType
from agent_saga.mesh._inputs import MeshError
from agent_saga.notekeys import verifier_keys

__all__ = ["DEVICE_KEYS", "Signed", "device_keys", "device_keys_path", "enrol", "sign_head", "signed_prefix"]

#: The hub's trusted device keys' file, next to the operator keys in the host's config directory.
DEVICE_KEYS = "device-keys"
_HEAD = RecordType.DEVICE_HEAD.value
_ROLE = "device key"
_HOW = ("make a key with 'agent-saga approvals keygen --approver phone-1 --key FILE' and start the device's "
        "log with it: agent-saga mesh enrol LOG --key FILE")


def device_keys_path() -> Path:
    """The hub's trusted device keys: ``/etc/agent-saga/device-keys`` (under ``$AGENT_SAGA_HOST_ROOT`` if set)."""
    return host_list_path(DEVICE_KEYS)


def device_keys(trusted: str | os.PathLike[str] | OperatorKeys | None = None) -> OperatorKeys:
    """The device keys a hub trusts: ``trusted`` (a list's path, or the keys), default the host's list."""
    if isinstance(trusted, OperatorKeys):
        return trusted
    return OperatorKeys.load(trusted if trusted is not None else device_keys_path(), role=_ROLE)


def _key(key: object) -> OperatorKey:
    """``key`` as a device's signing key: an OperatorKey, or the path of its file; MeshError (one line) otherwise."""
    if isinstance(key, OperatorKey):
        return key
    if not isinstance(key, (str, os.PathLike)):
        raise MeshError(f"a device key is the path of its file, got {type(key).__name__}: {_HOW}")
    try:
        return OperatorKey.load(key, _ROLE, _HOW)
    except ConfigurationError as err:
        raise MeshError(str(err)) from None


def enrol(path: str | os.PathLike[str], key: object) -> str:
    """Start a device's log at ``path`` (absent or empty) with its key; return the device's id.

    The first record is a DEVICE_HEAD naming the key's public half, signed by it: the device's
    id (its hash) commits to the key. ``key`` is an ``OperatorKey`` or the path of its file.
    """
    signer = _key(key)
    log = Path(path)
    if log.exists() and log.stat().st_size:
        raise MeshError(
            f"{log}: already holds records; a device's key is its log's first record, so enrol a new log "
            "(a new device) with it"
        )
    if not log.exists():
        private_dir(log.parent)  # as FileWAL makes a log's directory
        write_new(log, [])
    _, head = append_signed(log, RecordType.DEVICE_HEAD, {"key": signer.public}, signer)
    return head


def sign_head(path: str | os.PathLike[str], key: object) -> tuple[int, str]:
    """Append a DEVICE_HEAD signed by the device's key: it vouches for every record before it. (seq, hash).

    Refused (one line) when ``key`` is not the key the log was enrolled with, or the log's chain
    is broken. Run it at each sync, before the log leaves the device: a hub merges nothing after
    the last signed head.
    """
    signer = _key(key)
    log = Path(path)
    first = next(iter(read_records(log)), None)
    body = first.get("body") if first is not None else None
    if first is None or first.get("type") != _HEAD or not isinstance(body, dict):
        raise MeshError(f"{log}: its first record is not a DEVICE_HEAD: the log was not enrolled ({_HOW})")
    if body.get("key") != signer.public:
        raise MeshError(
            f"{log}: the device enrolled with the key {inert(str(body.get('key')).split('+')[0])}, not "
            f"{signer.key_id}: only the device's own key signs its heads"
        )
    return append_signed(log, RecordType.DEVICE_HEAD, {"device": first["hash"]}, signer)


class Signed:
    """What a device's key vouches for in its accepted chain (see ``signed_prefix``)."""

    __slots__ = ("key", "taken", "why")

    def __init__(self, taken: int, key: str, why: str) -> None:
        self.taken = taken  # how many records, from seq 1, are merged
        self.key = key  # the device's key id ('' for an unsigned device)
        self.why = why  # why the rest is refused ('' when nothing is)


def signed_prefix(device: str, records: Sequence[Record], trusted: OperatorKeys, allow_unsigned: bool) -> Signed:
    """How much of a device's accepted chain (seq 1, 2, ...) its key vouches for, and why not the rest.

    An unsigned device (its first record is no DEVICE_HEAD: a log written before device keys) is a
    claim: refused, or taken whole with ``allow_unsigned``. A signed device is refused whole unless
    its enrolment is signed by the key it names and the hub trusts that key; otherwise its records
    are taken up to its last DEVICE_HEAD that the same key signed, and a DEVICE_HEAD signed by any
    other key ends what is taken before it.
    """
    first, count = records[0], len(records)
    if first.get("type") != _HEAD:
        if allow_unsigned:
            return Signed(count, "", "")
        return Signed(0, "", (
            f"it is unsigned (its first record is a {first.get('type')}, not a DEVICE_HEAD): no device key vouches "
            "for it, and anyone holding a copy of the log can extend it; enrol devices with a key (agent-saga mesh "
            "enrol), or merge with --allow-unsigned to take unsigned logs as claims"
        ))
    body: Any = first.get("body")
    try:
        ((kid, public),) = verifier_keys([str(body.get("key") if isinstance(body, dict) else "")],
                                         "its DEVICE_HEAD").items()
    except ValueError:
        return Signed(0, "", "its first record (DEVICE_HEAD) names no device key (<name>+<id>+<key>)")
    own = OperatorKeys({kid: public}, f"the key device {device[:16]} enrolled with", role="device key of its own")
    problem = own.problem(first)
    if problem:
        return Signed(0, kid, f"its enrolment (seq 1) is not signed by the key it names: {problem}")
    if trusted.error or trusted.keys.get(kid) != public:
        where = trusted.error or f"{trusted.location}: {len(trusted.keys)} key(s)"
        return Signed(0, kid, (
            f"its key {kid} is not a trusted device key on this hub ({where}); to trust it, as root: "
            f"agent-saga approvals trust '{kid}+...' --trusted-keys {trusted.location}"
        ))
    taken = 1
    for i, record in enumerate(records[1:], start=2):
        if record.get("type") != _HEAD:
            continue
        problem = own.problem(record)
        if problem:
            return Signed(taken, kid, (
                f"seq {record.get('seq')} is a DEVICE_HEAD not signed by the device's own key {kid} ({problem}), "
                f"so nothing after the device's last signed head (seq {taken}) is its own"
            ))
        taken = i
    if taken < count:
        return Signed(taken, kid, (
            f"beyond the device's last signed head (seq {taken}): no DEVICE_HEAD signed by its key {kid} covers them "
            "(the device signs at each sync: agent-saga mesh sign)"
        ))
    return Signed(count, kid, "")
