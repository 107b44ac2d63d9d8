"""Signed attestations: what changes a log's meaning is signed by a key the agent does not hold.

A COMPACTION record says "these records were removed, and the sagas they belonged
to were settled"; a REDACTION record says "these bodies were erased on purpose".
Readers with privileges act on what they say: the verifier accepts the gap, the
recovery daemon has nothing left to undo. The agent can write its own log, so an
attestation it wrote proves nothing. Each one therefore carries an Ed25519
signature by an *operator* key, and a reader counts it only when that key is in
the host's trusted operator keys, ``/etc/agent-saga/operator-keys``: a list root
owns and the agent can read but not change (the approver keys' model, see
``agent_saga.approvals._authority``; ``AGENT_SAGA_HOST_ROOT`` re-roots it for tests,
as it does the approver keys).

The signature covers the attestation's type, seq, the ``prev`` hash it continues
from and its whole body except the signature itself, so it cannot be moved to
another place in the log or to another log.

An operator's act on one saga (a repair session's ``REPAIR_*`` records,
``agent_saga.recovery.repair``) is appended by the log's writer, which numbers it,
so it cannot be signed over its seq: :meth:`OperatorKey.sign_saga` signs its type,
its saga's id and its whole body (which names the session it belongs to) under a
domain of its own, and :meth:`OperatorKeys.saga_problem` checks it. Such a
signature cannot be moved to another saga, nor read as a compaction's. Keys are the approvers' format
(``agent_saga.notekeys``): ``agent-saga approvals keygen --approver ops@corp --key
FILE`` makes one and ``agent-saga approvals trust KEY --trusted-keys
/etc/agent-saga/operator-keys`` (as root) trusts it. Checking a signature needs
``cryptography`` (``pip install 'agent-saga[approvals]>=3.0.0.dev0'``); without it no
attestation can be checked, and every one is a break.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.log.codec import canonical
from agent_saga.notekeys import ED25519, ed25519, key_material, read_host_list, verifier_keys

__all__ = [
    "HOW_TO_SIGN",
    "OPERATOR_KEYS",
    "SIGNATURE_FIELD",
    "OperatorKey",
    "OperatorKeys",
    "host_list_path",
    "operator_keys_path",
    "unsigned_body",
]

#: The trusted operator keys' file, next to the approver keys in the host's config directory.
OPERATOR_KEYS = "operator-keys"
#: The body field holding ``{"key": "<name>+<id>", "ed25519": "<base64 signature>"}``.
SIGNATURE_FIELD = "signature"
_DOMAIN = "agent-saga log attestation v1\n"
_SAGA_DOMAIN = "agent-saga saga attestation v1\n"
_HOST_ROOT_ENV = "AGENT_SAGA_HOST_ROOT"
# gate.host names the same directory; it sits above the log layer, which may not import it.
_CONFIG_DIR = Path("/etc/agent-saga")
HOW_TO_SIGN = (
    "make an operator key with 'agent-saga approvals keygen --approver ops@example --key FILE' "
    f"and have root trust it ('agent-saga approvals trust KEY --trusted-keys {_CONFIG_DIR / OPERATOR_KEYS}'), "
    "then pass signer=FILE"
)


def host_list_path(name: str) -> Path:
    """A trust list in the host's config directory: ``/etc/agent-saga/<name>`` (under ``$AGENT_SAGA_HOST_ROOT`` if set)."""
    root = os.environ.get(_HOST_ROOT_ENV)
    base = Path(root) / _CONFIG_DIR.relative_to("/") if root else _CONFIG_DIR
    return base / name


def operator_keys_path() -> Path:
    """The host's trusted operator keys: ``/etc/agent-saga/operator-keys`` (under ``$AGENT_SAGA_HOST_ROOT`` if set)."""
    return host_list_path(OPERATOR_KEYS)


def _ed25519() -> Any:
    try:
        return ed25519("approvals")
    except ImportError as err:
        raise ConfigurationError(f"log attestations are signed and checked with Ed25519. {err}") from None


def unsigned_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body without its signature: what the signature covers, with the header fields."""
    return {k: v for k, v in body.items() if k != SIGNATURE_FIELD}


def _payload(rtype: str, seq: int, prev: str | None, body: Mapping[str, Any]) -> bytes:
    return (_DOMAIN + canonical({"type": rtype, "seq": seq, "prev": prev, "body": unsigned_body(body)})).encode()


def _saga_payload(rtype: str, saga: str, body: Mapping[str, Any]) -> bytes:
    return (_SAGA_DOMAIN + canonical({"type": rtype, "saga": saga, "body": unsigned_body(body)})).encode()


class OperatorKey:
    """An operator's private key: it signs attestations. Keep it where the agent cannot read it."""

    def __init__(self, text: str) -> None:
        parts = text.strip().split("+", 4)  # base64 may itself contain "+"
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"] or not all(parts[2:4]):
            raise ConfigurationError(f"an operator key reads PRIVATE+KEY+<name>+<id>+<key>; {HOW_TO_SIGN}")
        self.key_id = f"{parts[2]}+{parts[3]}"
        try:
            seed = key_material(parts[4], "operator key")
        except ValueError as err:
            raise ConfigurationError(str(err)) from None
        self._private = _ed25519().Ed25519PrivateKey.from_private_bytes(seed)
        public = self._private.public_key().public_bytes_raw()
        #: The verifier key to trust: ``<name>+<id>+<base64>``.
        self.public = f"{self.key_id}+{base64.b64encode(ED25519 + public).decode()}"

    @classmethod
    def load(cls, path: str | os.PathLike[str], role: str = "operator key", how: str = HOW_TO_SIGN) -> OperatorKey:
        """The key stored at ``path`` (as ``agent-saga approvals keygen --key`` wrote it).

        ``role`` and ``how`` (what to do instead) word the one-line error: the same key signs a mesh
        device's heads.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigurationError(f"no {role} at {path}: {how}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigurationError(f"cannot read the {role} {path}: {err}") from None
        try:
            return cls(text)
        except ConfigurationError:
            raise ConfigurationError(f"{path} holds no {role} (a key file reads PRIVATE+KEY+<name>+<id>+<key>): {how}") from None

    @classmethod
    def of(cls, signer: object, what: str = "a compaction or redaction") -> OperatorKey:
        """``signer`` as a key: an OperatorKey, or the path of its file; a one-line error otherwise."""
        if isinstance(signer, OperatorKey):
            return signer
        if signer is None:
            raise ConfigurationError(
                f"{what} changes what the log means, so it must be signed by an "
                f"operator key the agent does not hold: {HOW_TO_SIGN}"
            )
        if isinstance(signer, (str, os.PathLike)):
            return cls.load(signer)
        raise ConfigurationError(f"signer= takes the path of an operator key file, got {type(signer).__name__}")

    def sign(self, rtype: str, seq: int, prev: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with this key's signature over it, for a record of ``rtype`` at ``seq`` after ``prev``."""
        signature = self._private.sign(_payload(rtype, seq, prev, body))
        return {**unsigned_body(body), SIGNATURE_FIELD: {
            "key": self.key_id, "ed25519": base64.b64encode(signature).decode(),
        }}

    def sign_saga(self, rtype: str, saga: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with this key's signature over it, for a record of ``rtype`` about ``saga``."""
        signature = self._private.sign(_saga_payload(rtype, saga, body))
        return {**unsigned_body(body), SIGNATURE_FIELD: {
            "key": self.key_id, "ed25519": base64.b64encode(signature).decode(),
        }}

    def __repr__(self) -> str:
        return f"OperatorKey({self.key_id!r})"  # never the key itself


class OperatorKeys:
    """The public keys whose signatures make an attestation count, by ``<name>+<id>``.

    ``role`` names the keys in every refusal: the same check serves the mesh's device keys.
    """

    def __init__(self, keys: Mapping[str, bytes], location: str, error: str = "", role: str = "operator key") -> None:
        self.keys = dict(keys)
        self.location = location
        self.error = error  # why the list could not be read ('' when it could)
        self.role = role

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, role: str = "operator key") -> OperatorKeys:
        """The keys listed at ``path`` (default: the host's). Never raises: a bad list trusts no key, and says why."""
        file = Path(path) if path is not None else operator_keys_path()
        try:
            text = read_host_list(file, f"the trusted {role}s")
        except ValueError as err:
            return cls({}, str(file), str(err), role)
        if text is None:
            return cls({}, str(file), role=role)
        try:
            return cls(verifier_keys(text.splitlines(), str(file)), str(file), role=role)
        except ValueError as err:
            return cls({}, str(file), str(err), role)

    def problem(self, record: Mapping[str, Any]) -> str:
        """Why ``record`` (an attestation) is not signed by a trusted operator key ('' when it is)."""
        seq, prev = record.get("seq"), record.get("prev")
        return self._check(record, lambda body: _payload(
            str(record.get("type")), int(seq) if isinstance(seq, int) else -1, prev if isinstance(prev, str) else None,
            body,
        ))

    def saga_problem(self, record: Mapping[str, Any]) -> str:
        """Why ``record`` (an operator's act on its saga) is not signed by a trusted operator key ('' when it is)."""
        return self._check(record, lambda body: _saga_payload(str(record.get("type")), str(record.get("saga")), body))

    def _check(self, record: Mapping[str, Any], payload: Callable[[Mapping[str, Any]], bytes]) -> str:
        body = record.get("body")
        signed = body.get(SIGNATURE_FIELD) if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(signed, dict):
            return (
                f"it carries no {self.role.split()[0]} signature: anyone who can write the log could have written it "
                f"(it must be signed by a key listed in {self.location})"
            )
        signer, stamp = signed.get("key"), signed.get("ed25519")
        if not isinstance(signer, str) or not isinstance(stamp, str):
            return "its signature is malformed (it needs 'key' and 'ed25519' strings)"
        if self.error:
            return f"its signature by {signer} cannot be checked: {self.error}"
        public = self.keys.get(signer)
        if public is None:
            listed = f"{len(self.keys)} key(s)" if self.keys else "no keys"
            return f"it is signed by {signer}, which is not a trusted {self.role} ({self.location}: {listed})"
        try:
            signature = base64.b64decode(stamp, validate=True)
        except (binascii.Error, ValueError):
            return "its signature is not base64"
        try:
            module = _ed25519()
        except ConfigurationError as err:
            return f"its signature by {signer} cannot be checked: {err}"
        from cryptography.exceptions import InvalidSignature

        try:
            module.Ed25519PublicKey.from_public_bytes(public).verify(signature, payload(body))
        except InvalidSignature:
            return f"the signature by {signer} does not cover this body at this place in the log"
        return ""
