"""Who may decide: approver names, approvers' signing keys, and the host's trusted keys.

The agent whose step waits can write the approval store -- its own files, or the
Redis it shares -- so what the store says proves nothing by itself. A grant counts
only when it carries an Ed25519 signature by a key the host trusts
(``/etc/agent-saga/approver-keys``, see :mod:`agent_saga.gate.host`) over this
request (id, saga, step, tool, rule), the step's arguments as the gateway itself
holds them, and the decision (status, approver, note, time, channel). The request
part is one SHA-256, the *action digest* (:func:`action_digest`), which the approvals
list and every notification show, so the person who signs can see what their
signature will cover. The agent
holds public keys only: it can check a signature, never make one. A signing key
lives with the person (or the web service) that decides, readable by its owner
alone (0600).

Keys are strings in the signed-note format of :mod:`agent_saga.audit.signing`:
``PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`` signs, ``<name>+<id>+<base64(0x01
|| public key)>`` verifies; ``<name>+<id>`` names the key in records. Needs
``cryptography`` (``pip install 'agent-saga[approvals]>=3.0.0'``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga.approvals._entry import ApprovalEntry
from agent_saga.approvals._errors import ApprovalNotAuthenticated
from agent_saga.errors import ConfigurationError
from agent_saga.gate._files import append_line, make_dirs
from agent_saga.gate.host import APPROVER_KEYS, config_dir
from agent_saga.log.codec import canonical
from agent_saga.notekeys import (
    ANONYMOUS,
    ED25519,
    approver_name,
    ed25519,
    generate_signer,
    host_list_lines,
    key_material,
    verifier_keys,
)

__all__ = [
    "ANONYMOUS",
    "KEY_ENV",
    "SigningKey",
    "TrustedKeys",
    "action_digest",
    "approver_name",
    "default_key_path",
    "default_trust_path",
    "require_crypto",
    "trust_key",
]

KEY_ENV = "AGENT_SAGA_APPROVER_KEY"
def default_key_path() -> Path:
    """``$AGENT_SAGA_APPROVER_KEY``, else ``$AGENT_SAGA_HOME/approver.key``, else ``~/.agent-saga/approver.key``."""
    explicit = os.environ.get(KEY_ENV)
    if explicit:
        return Path(explicit)
    home = os.environ.get("AGENT_SAGA_HOME")
    return (Path(home) if home else Path.home() / ".agent-saga") / "approver.key"


def default_trust_path() -> Path:
    """The host's trusted approver keys: ``/etc/agent-saga/approver-keys``."""
    return config_dir() / APPROVER_KEYS


def require_crypto() -> Any:
    """The Ed25519 module of ``cryptography``; ConfigurationError naming the extra when it is missing."""
    try:
        return ed25519("approvals")
    except ImportError as err:
        raise ConfigurationError(f"approvals are signed and verified with Ed25519. {err}") from None


def _material(blob: str, what: str) -> bytes:
    try:
        return key_material(blob, what)
    except ValueError as err:
        raise ConfigurationError(str(err)) from None


_ACTION = "agent-saga approval action v1\n"
# v1 signatures (before the action digest) covered neither the reason nor the semantics; they
# are still verified as such, so decisions signed by an earlier CLI keep their standing.
_DOMAIN_V1 = "agent-saga approval decision v1\n"
_DOMAIN_V2 = "agent-saga approval decision v2\n"


def action_digest(request: ApprovalEntry) -> str:
    """SHA-256 (hex) over what a decision is about: the request, its reason and the step's arguments.

    The approver's signature covers it (with the decision), and the gateway computes
    it again from its own copy of the request: a reason or an argument the store
    shows differently from what the gateway asked yields another digest, and the
    grant is not believed.
    """
    action = {
        "request": request.id, "saga": request.saga_id, "step": request.step, "tool": request.tool,
        "semantics": request.semantics, "rule": request.rule, "reason": request.reason,
        "args": request.args,
    }
    # Not the further reasons (``reasons``): which limits defer a step depends on the spend when
    # it is asked, so a restarted gateway may list others; the first reason names the rule.
    return hashlib.sha256((_ACTION + canonical(action)).encode()).hexdigest()


def _decision(decision: ApprovalEntry) -> dict[str, Any]:
    return {
        "status": decision.status.value, "approver": decision.approver, "note": decision.note,
        "decided_at": decision.decided_at, "via": decision.decided_via,
    }


def _payload(decision: ApprovalEntry, request: ApprovalEntry) -> bytes:
    """What a signature covers: the action digest of ``request``, and the decision as ``decision`` states it."""
    return (_DOMAIN_V2 + canonical({"action": action_digest(request), **_decision(decision)})).encode()


def _payload_v1(decision: ApprovalEntry, request: ApprovalEntry) -> bytes:
    """What a v1 signature covered: the request without its reason or semantics."""
    return (_DOMAIN_V1 + canonical({
        "request": request.id, "saga": request.saga_id, "step": request.step, "tool": request.tool,
        "rule": request.rule, "args": request.args, **_decision(decision),
    })).encode()


class SigningKey:
    """An approver's private key: it signs decisions. Keep it where the agent cannot read it."""

    def __init__(self, text: str) -> None:
        parts = text.strip().split("+", 4)  # base64 may itself contain "+"
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise ConfigurationError(
                "a signing key reads PRIVATE+KEY+<name>+<id>+<key>; make one with 'agent-saga approvals keygen'"
            )
        self.name, kid = parts[2], parts[3]
        self.key_id = f"{self.name}+{kid}"
        self._text = text.strip()
        self._private = require_crypto().Ed25519PrivateKey.from_private_bytes(_material(parts[4], "signing key"))
        public = self._private.public_key().public_bytes_raw()
        #: The verifier key to trust: ``<name>+<id>+<base64>``.
        self.public = f"{self.key_id}+{base64.b64encode(ED25519 + public).decode()}"

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        """A fresh key named ``name`` (an approver handle without spaces or '+', e.g. risk@corp)."""
        require_crypto()
        try:
            private, _public = generate_signer(name, "approvals")
        except ValueError as err:
            raise ConfigurationError(str(err)) from None
        return cls(private)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> SigningKey:
        """The key stored at ``path`` (default: :func:`default_key_path`)."""
        file = Path(path) if path is not None else default_key_path()
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigurationError(
                f"no signing key at {file}: a grant must be signed. Create one with 'agent-saga approvals keygen "
                "--approver WHO' and have root trust it on the agents' hosts ('agent-saga approvals trust KEY')"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigurationError(f"cannot read the signing key {file}: {err}") from None
        return cls(text)

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the key to a new file readable by its owner only (0600, in a 0700 directory if made)."""
        file = Path(path) if path is not None else default_key_path()
        make_dirs(file.parent, 0o700)
        try:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigurationError(f"{file} already exists: a signing key is never overwritten") from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(self._text + "\n")
            out.flush()
            os.fsync(out.fileno())
        return file

    def sign(self, decided: ApprovalEntry) -> ApprovalEntry:
        """``decided`` with this key's signature over it."""
        signature = self._private.sign(_payload(decided, decided))
        return decided.replace(signer=self.key_id, signature=base64.b64encode(signature).decode())

    def __repr__(self) -> str:
        return f"SigningKey({self.key_id!r})"  # never the key itself


@dataclass(frozen=True, slots=True)
class TrustedKeys:
    """The public keys whose signatures make a decision count, by ``<name>+<id>``."""

    keys: dict[str, bytes]
    location: str

    @classmethod
    def of(cls, lines: Iterable[str], location: str) -> TrustedKeys:
        """Keys from ``<name>+<id>+<base64>`` lines; blank lines and ``#`` comments are skipped."""
        try:
            return cls(verifier_keys(lines, location), location)
        except ValueError as err:
            raise ConfigurationError(str(err)) from None

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> TrustedKeys:
        """The keys listed at ``path`` (default: the host's); none if the file does not exist."""
        file = Path(path) if path is not None else default_trust_path()
        return cls.of(host_list_lines(file, "the trusted approver keys"), str(file))

    def verify(self, decided: ApprovalEntry, request: ApprovalEntry) -> str:
        """The ``<name>+<id>`` of the trusted key that signed ``decided`` for ``request``.

        ``request`` is the gateway's own copy: what the store says about the step
        (arguments included) is not believed. Raises ApprovalNotAuthenticated.
        """
        return self.check(decided, request)[0]

    def check(self, decided: ApprovalEntry, request: ApprovalEntry) -> tuple[str, bool]:
        """As :meth:`verify`, and whether the signature covers the reason (False: a v1 signature).

        A v1 signature (made before the action digest) covers the request, its
        arguments and the decision, not the reason: it is still believed for what it
        covers, and a view that shows the reason beside it marks it unsigned.
        """
        try:
            approver_name(decided.approver)
        except ConfigurationError as err:
            raise ApprovalNotAuthenticated(f"it names no approver one can read ({err})") from None
        if not decided.signer or not decided.signature:
            raise ApprovalNotAuthenticated("it carries no signature (only the approvals CLI or API signs)")
        public = self.keys.get(decided.signer)
        if public is None:
            listed = f"{len(self.keys)} key(s)" if self.keys else "no keys"
            raise ApprovalNotAuthenticated(
                f"it is signed by {decided.signer}, which is not among the trusted approver keys "
                f"({self.location}: {listed})"
            )
        try:
            signature = base64.b64decode(decided.signature, validate=True)
        except (binascii.Error, ValueError):
            raise ApprovalNotAuthenticated("its signature is not base64") from None
        from cryptography.exceptions import InvalidSignature

        verifier = require_crypto().Ed25519PublicKey.from_public_bytes(public)
        for payload, covers_reason in ((_payload, True), (_payload_v1, False)):
            try:
                verifier.verify(signature, payload(decided, request))
            except InvalidSignature:
                continue
            return decided.signer, covers_reason
        raise ApprovalNotAuthenticated(
            f"the signature by {decided.signer} does not match this request, its arguments and this decision"
        )


def trust_key(public: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Add a verifier key to the trusted approver keys (default: the host's); False if already there.

    The file is created 0644 (agents read it); only its owner (root) should be able
    to change it, or an agent could trust a key of its own.
    """
    file = Path(path) if path is not None else default_trust_path()
    line = public.strip()
    keys = TrustedKeys.of([line], "the key to trust").keys
    if len(keys) != 1:  # a blank or "#" line holds no key (the list skips those)
        raise ConfigurationError(
            f"the key to trust {line!r} holds no key: give the line keygen printed (<name>+<id>+<key>)"
        )
    (key_id,) = keys
    if key_id in TrustedKeys.load(file).keys:
        return False
    append_line(file, line)
    return True
