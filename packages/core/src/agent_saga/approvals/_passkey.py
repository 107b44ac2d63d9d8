"""Passkey approvals: a person's WebAuthn assertion over exactly the action being approved.

The *passkey challenge* of a request is one SHA-256 over the canonical action: request
id, saga, step, tool, the step's arguments, rule and deadline (:func:`passkey_challenge`).
``agent-saga approvals serve`` shows that action and its digest and asks the browser for
an assertion with the digest as its challenge; the gateway computes the digest again from
its own copy of the request (the arguments the step will run with, the deadline its log
states) and believes the grant only if py_webauthn (``pip install 'agent-saga[passkey]>=3.0.0'``)
verifies the assertion against a registered credential with that challenge, the user
verified (UV) and the sign count moved forward.

Registered credentials live like the trusted approver keys: one JSON line each in a list
on the agent host that only its owner (root) changes, ``/etc/agent-saga/approver-passkeys``
(re-rooted by ``AGENT_SAGA_HOST_ROOT``). A list that group or others may write is refused:
whoever can add a line there can approve. The approver's name is taken from that list,
never from the store. Only Ed25519 (COSE -8) and ES256 (-7) credentials are accepted.

The sign count rule is WebAuthn's (section 7.2, step 21): when the assertion's count or the
last one known is non-zero, the new one must be strictly greater; an authenticator that
always reports 0 (synced platform passkeys do) passes it, and then only the challenge --
bound to one request and its deadline -- keeps an assertion from counting twice. The last
known count is the larger of the registered one and every count the saga's log records
for the credential.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga.approvals._authority import approver_name
from agent_saga.approvals._entry import ApprovalEntry
from agent_saga.approvals._errors import ApprovalNotAuthenticated
from agent_saga.errors import ConfigurationError
from agent_saga.gate._files import append_line
from agent_saga.gate.host import APPROVER_PASSKEYS, config_dir
from agent_saga.install import pip_install
from agent_saga.log.codec import canonical
from agent_saga.log.records import RecordType
from agent_saga.notekeys import host_list_lines

__all__ = [
    "ALGORITHMS",
    "DENIAL_NOTE_MAX",
    "PASSKEYS",
    "PasskeyCheck",
    "PasskeyCredential",
    "PasskeyCredentials",
    "PasskeyHistory",
    "assertion_options",
    "default_passkeys_path",
    "passkey_challenge",
    "passkey_denial_challenge",
    "passkey_digest",
    "passkey_history",
    "registration_options",
    "require_webauthn",
    "trust_passkey",
    "verify_assertion",
    "verify_registration",
]

#: The registered credentials, one JSON line each, in the host's config directory.
PASSKEYS = APPROVER_PASSKEYS
#: COSE algorithms accepted: Ed25519 (EdDSA, -8) and ES256 (ECDSA P-256 with SHA-256, -7).
ALGORITHMS = {-8: "Ed25519", -7: "ES256"}
_DOMAIN = "agent-saga passkey action v1\n"
# A denial's challenge has its own prefix (and says "deny" inside): neither kind of assertion
# can ever be taken for the other.
_DENY_DOMAIN = "agent-saga passkey denial v1\n"
#: The longest note a passkey denial carries (characters): it is signed, stored and logged.
DENIAL_NOTE_MAX = 500
_INSTALL = pip_install("agent-saga", "passkey")


def default_passkeys_path() -> Path:
    """The host's registered passkeys: ``/etc/agent-saga/approver-passkeys``."""
    return config_dir() / PASSKEYS


def require_webauthn() -> Any:
    """The ``webauthn`` module (py_webauthn); ConfigurationError naming the extra when it is missing."""
    try:
        import webauthn
    except ImportError:
        raise ConfigurationError(
            f"passkey approvals are verified with py_webauthn, which is not installed: {_INSTALL}"
        ) from None
    return webauthn


def passkey_challenge(request: ApprovalEntry, deadline: float) -> bytes:
    """The WebAuthn challenge for ``request``: SHA-256 over its canonical action.

    ``deadline`` is the one the gateway holds to (its log's), so an assertion made for
    an earlier request with the same id and another deadline is another challenge.
    """
    return hashlib.sha256((_DOMAIN + canonical(_action(request, deadline))).encode()).digest()


def passkey_denial_challenge(request: ApprovalEntry, deadline: float, note: str) -> bytes:
    """The WebAuthn challenge for *denying* ``request``: SHA-256 over the same canonical action,
    the decision ("deny") and the person's ``note``, under a prefix of its own.

    Domain-separated from :func:`passkey_challenge` (which stays what it always was): an
    approval's assertion never verifies as a denial, nor a denial's as an approval. The note
    is signed too, so the one the log shows is the one the person wrote.
    """
    action = {**_action(request, deadline), "decision": "deny", "note": note}
    return hashlib.sha256((_DENY_DOMAIN + canonical(action)).encode()).digest()


def _action(request: ApprovalEntry, deadline: float) -> dict[str, Any]:
    """What a person is asked to decide: the request, its step and arguments, its rule and deadline."""
    return {
        "request": request.id, "saga": request.saga_id, "step": request.step, "tool": request.tool,
        "args": request.args, "rule": request.rule, "deadline": deadline,
    }


def passkey_digest(request: ApprovalEntry, deadline: float) -> str:
    """:func:`passkey_challenge` in hex: what ``approvals serve`` shows beside the action."""
    return passkey_challenge(request, deadline).hex()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"{what} is not base64url") from None


@dataclass(frozen=True, slots=True)
class PasskeyCredential:
    """One registered passkey: whose it is, its COSE public key, and where it was registered."""

    credential_id: str  # base64url, as WebAuthn names it
    approver: str
    public_key: str  # base64url of the COSE key
    algorithm: int
    sign_count: int
    rp_id: str
    origin: str

    def to_line(self) -> str:
        return canonical({
            "credential_id": self.credential_id, "approver": self.approver, "public_key": self.public_key,
            "algorithm": self.algorithm, "sign_count": self.sign_count, "rp_id": self.rp_id,
            "origin": self.origin,
        })

    @classmethod
    def from_line(cls, line: str, where: str) -> PasskeyCredential:
        try:
            data = json.loads(line)
            credential = cls(
                credential_id=str(data["credential_id"]), approver=approver_name(data["approver"]),
                public_key=str(data["public_key"]), algorithm=int(data["algorithm"]),
                sign_count=int(data["sign_count"]), rp_id=str(data["rp_id"]), origin=str(data["origin"]),
            )
        except (ValueError, KeyError, TypeError, ConfigurationError) as err:
            raise ConfigurationError(f"{where}: not a registered passkey line ({err})") from None
        if credential.algorithm not in ALGORITHMS:
            raise ConfigurationError(
                f"{where}: algorithm {credential.algorithm} is not accepted (only Ed25519 -8 and ES256 -7)"
            )
        _unb64url(credential.credential_id, f"{where}: credential_id")
        _unb64url(credential.public_key, f"{where}: public_key")
        return credential


@dataclass(frozen=True, slots=True)
class PasskeyCredentials:
    """The registered passkeys by credential id; ``location`` names the list they came from."""

    credentials: dict[str, PasskeyCredential]
    location: str

    @classmethod
    def of(cls, lines: Iterable[str], location: str) -> PasskeyCredentials:
        found: dict[str, PasskeyCredential] = {}
        for n, raw in enumerate(lines, 1):
            line = raw.strip()
            if line and not line.startswith("#"):
                credential = PasskeyCredential.from_line(line, f"{location}:{n}")
                found[credential.credential_id] = credential
        return cls(found, location)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> PasskeyCredentials:
        """The passkeys listed at ``path`` (default: the host's); none if the file does not exist.

        ConfigurationError when group or others may write the list (or its directory):
        anyone who can add a line there can approve.
        """
        file = Path(path) if path is not None else default_passkeys_path()
        return cls.of(host_list_lines(file, "the registered passkeys"), str(file))


def trust_passkey(line: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Add a registered passkey (a line ``approvals serve`` printed) to the list; False if already there.

    The list is created 0644 (agents read it) in a 0755 directory: only its owner (root)
    should be able to change it.
    """
    file = Path(path) if path is not None else default_passkeys_path()
    credential = PasskeyCredential.from_line(line.strip(), "the passkey to register")
    if credential.credential_id in PasskeyCredentials.load(file).credentials:
        return False
    append_line(file, credential.to_line())
    return True


@dataclass(frozen=True, slots=True)
class PasskeyCheck:
    """A verified assertion: whose credential, the count it reported, and its fingerprint."""

    credential: PasskeyCredential
    sign_count: int
    #: SHA-256 (hex) of the assertion's signature: names this one assertion in the log.
    assertion: str

    def record(self, challenge: bytes) -> dict[str, Any]:
        """What the decision record says about the passkey (the log's memory of its count)."""
        c = self.credential
        return {
            "credential_id": c.credential_id, "approver": c.approver, "algorithm": ALGORITHMS[c.algorithm],
            "sign_count": self.sign_count, "assertion": self.assertion, "challenge": challenge.hex(),
            "user_verified": True, "rp_id": c.rp_id, "origin": c.origin,
        }


@dataclass(frozen=True, slots=True)
class PasskeyHistory:
    """What a log says about passkeys: the highest count per credential, and which request took which assertion."""

    counts: dict[str, int]
    accepted: dict[str, str]  # assertion fingerprint -> request id


# A passkey denial's count and assertion take part too: replayed later, as a grant or as
# another denial, it is refused like a grant's.
_DECISIONS = (RecordType.APPROVAL_GRANTED.value, RecordType.APPROVAL_BREAK_GLASS.value,
              RecordType.APPROVAL_DENIED.value)


def passkey_history(records: Iterable[Mapping[str, Any]]) -> PasskeyHistory:
    """The passkey decisions (grants and denials) ``records`` (a log) hold, every saga's."""
    counts: dict[str, int] = {}
    accepted: dict[str, str] = {}
    for record in records:
        body = record.get("body")
        if record.get("type") not in _DECISIONS or not isinstance(body, dict):
            continue
        passkey = body.get("passkey")
        if not isinstance(passkey, dict):
            continue
        cid, count = passkey.get("credential_id"), passkey.get("sign_count")
        if isinstance(cid, str) and isinstance(count, int) and not isinstance(count, bool):
            counts[cid] = max(count, counts.get(cid, 0))
        fingerprint, request = passkey.get("assertion"), body.get("request")
        if isinstance(fingerprint, str) and isinstance(request, str):
            accepted.setdefault(fingerprint, request)
    return PasskeyHistory(counts, accepted)


def _refused(why: str) -> ApprovalNotAuthenticated:
    return ApprovalNotAuthenticated(f"the passkey assertion is refused: {why}")


def verify_assertion(
    credentials: PasskeyCredentials,
    assertion: Mapping[str, Any],
    request: ApprovalEntry,
    deadline: float,
    history: PasskeyHistory | None = None,
    *,
    deny: bool = False,
    note: str = "",
) -> PasskeyCheck:
    """Check ``assertion`` (the browser's ``PublicKeyCredential.toJSON()``) for ``request``.

    ``request`` and ``deadline`` are the verifier's own (the gateway's copy, not the
    store's); ``history`` is what the log says (counts, and which request took which
    assertion). With ``deny=True`` the assertion must be over the denial's challenge
    (:func:`passkey_denial_challenge`, with ``note``), else over the grant's. Raises
    ApprovalNotAuthenticated with the one reason it is refused.
    """
    webauthn = require_webauthn()
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidJSONStructure

    history = history or PasskeyHistory({}, {})
    cid = assertion.get("id") if isinstance(assertion, Mapping) else None
    if not isinstance(cid, str):
        raise _refused("it names no credential id")
    credential = credentials.credentials.get(cid)
    if credential is None:
        listed = f"{len(credentials.credentials)} passkey(s)" if credentials.credentials else "no passkeys"
        raise _refused(f"credential {cid[:16]} is not registered ({credentials.location}: {listed})")
    response = assertion.get("response")
    signature = response.get("signature") if isinstance(response, Mapping) else None
    if not isinstance(signature, str):
        raise _refused("it carries no signature")
    fingerprint = hashlib.sha256(_unb64url(signature, "the assertion's signature")).hexdigest()
    taken = history.accepted.get(fingerprint)
    if taken is not None and taken != request.id:
        raise _refused(f"it was already accepted for request {taken[:8]} (a replay)")
    # The count this very assertion reported when it was accepted for this request (a
    # restarted gateway concluding the same decision) does not count against it.
    last = max(credential.sign_count, history.counts.get(cid, 0))
    if taken == request.id:
        last = credential.sign_count
    challenge = passkey_denial_challenge(request, deadline, note) if deny else passkey_challenge(request, deadline)
    try:
        verified = webauthn.verify_authentication_response(
            credential=dict(assertion), expected_challenge=challenge, expected_rp_id=credential.rp_id,
            expected_origin=credential.origin, credential_public_key=_unb64url(credential.public_key, "public key"),
            credential_current_sign_count=last, require_user_verification=True,
        )
    except (InvalidAuthenticationResponse, InvalidJSONStructure, ConfigurationError) as err:
        text = str(err)
        if "challenge" in text and deny:
            text = (f"it was not made to deny this action with this note (challenge != sha256:{challenge.hex()}, "
                    "the denial of this request's action: its id, saga, step, tool, arguments, rule, deadline "
                    "and the note; an approval's assertion never counts as a denial)")
        elif "challenge" in text:
            text = (f"it was made for another action (challenge != sha256:{challenge.hex()}, this request's "
                    "action: its id, saga, step, tool, arguments, rule and deadline)")
        raise _refused(f"{text} (credential of {credential.approver})") from None
    except Exception as err:  # noqa: BLE001 - a malformed assertion must refuse, never crash the gateway
        raise _refused(f"it is malformed ({type(err).__name__}: {err})") from None
    if not verified.user_verified:
        raise _refused("the authenticator did not verify the user (UV flag not set)")
    return PasskeyCheck(credential, int(verified.new_sign_count), fingerprint)


def registration_options(approver: str, rp_id: str, challenge: bytes) -> str:
    """``navigator.credentials.create()`` options (JSON) for ``approver``: UV required, Ed25519 or ES256."""
    webauthn = require_webauthn()
    from webauthn.helpers.cose import COSEAlgorithmIdentifier
    from webauthn.helpers.structs import AuthenticatorSelectionCriteria, UserVerificationRequirement

    options = webauthn.generate_registration_options(
        rp_id=rp_id, rp_name="agent-saga approvals", user_name=approver_name(approver), challenge=challenge,
        authenticator_selection=AuthenticatorSelectionCriteria(user_verification=UserVerificationRequirement.REQUIRED),
        supported_pub_key_algs=[COSEAlgorithmIdentifier(a) for a in ALGORITHMS],
    )
    return str(webauthn.options_to_json(options))


def verify_registration(credential: Mapping[str, Any], approver: str, challenge: bytes, rp_id: str,
                        origin: str) -> PasskeyCredential:
    """The passkey ``credential`` (the browser's ``toJSON()``) registers; ConfigurationError saying why not."""
    webauthn = require_webauthn()
    from webauthn.helpers.cose import COSEAlgorithmIdentifier
    from webauthn.helpers.exceptions import InvalidJSONStructure, InvalidRegistrationResponse

    name = approver_name(approver)
    try:
        verified = webauthn.verify_registration_response(
            credential=dict(credential), expected_challenge=challenge, expected_rp_id=rp_id, expected_origin=origin,
            require_user_verification=True, supported_pub_key_algs=[COSEAlgorithmIdentifier(a) for a in ALGORITHMS],
        )
    except (InvalidRegistrationResponse, InvalidJSONStructure) as err:
        raise ConfigurationError(f"the passkey registration is refused: {err}") from None
    from webauthn.helpers import decode_credential_public_key

    algorithm = int(decode_credential_public_key(verified.credential_public_key).alg)
    if algorithm not in ALGORITHMS:  # the library checks it too; the list must never hold another
        raise ConfigurationError(f"the passkey registration is refused: algorithm {algorithm} is not accepted")
    return PasskeyCredential(
        credential_id=_b64url(verified.credential_id), approver=name,
        public_key=_b64url(verified.credential_public_key), algorithm=algorithm,
        sign_count=int(verified.sign_count), rp_id=rp_id, origin=origin,
    )


def assertion_options(credentials: PasskeyCredentials, challenge: bytes, rp_id: str) -> str:
    """``navigator.credentials.get()`` options (JSON): this challenge, the registered passkeys, UV required."""
    webauthn = require_webauthn()
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor, UserVerificationRequirement

    allowed = [PublicKeyCredentialDescriptor(id=_unb64url(c.credential_id, "credential_id"))
               for c in credentials.credentials.values() if c.rp_id == rp_id]
    options = webauthn.generate_authentication_options(
        rp_id=rp_id, challenge=challenge, allow_credentials=allowed,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return str(webauthn.options_to_json(options))
