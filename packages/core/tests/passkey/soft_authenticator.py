"""A software WebAuthn authenticator for the unit tests: Ed25519 (COSE -8) or ES256 (-7).

It makes assertions the way an authenticator does (authenticator data = rpIdHash || flags ||
sign count, signed together with the SHA-256 of the client data), so py_webauthn checks them
like any other; each knob (count, UV flag, origin, challenge) is one a test turns to see a refusal.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from agent_saga.approvals import PasskeyCredential

_UP, _UV = 0x01, 0x04


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SoftAuthenticator:
    def __init__(self, algorithm: int = -8, approver: str = "risk@corp", rp_id: str = "localhost",
                 origin: str = "http://localhost:8765") -> None:
        self.algorithm, self.approver, self.rp_id, self.origin = algorithm, approver, rp_id, origin
        self.credential_id = b64url(os.urandom(16))
        self.count = 0
        if algorithm == -8:
            self._key: Any = ed25519.Ed25519PrivateKey.generate()
            raw = self._key.public_key().public_bytes_raw()
            self.cose = cbor2.dumps({1: 1, 3: -8, -1: 6, -2: raw})
        elif algorithm == -7:
            self._key = ec.generate_private_key(ec.SECP256R1())
            numbers = self._key.public_key().public_numbers()
            self.cose = cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                                     -3: numbers.y.to_bytes(32, "big")})
        else:
            raise ValueError(algorithm)

    def registered(self, sign_count: int = 0) -> PasskeyCredential:
        """The line root would add for this authenticator."""
        return PasskeyCredential(self.credential_id, self.approver, b64url(self.cose), self.algorithm, sign_count,
                                 self.rp_id, self.origin)

    def assertion(self, challenge: bytes, *, count: int | None = None, uv: bool = True,
                origin: str | None = None) -> dict[str, Any]:
        """An assertion over ``challenge`` (``PublicKeyCredential.toJSON()`` shape); the count moves on by one."""
        if count is None:
            self.count += 1
            count = self.count
        client = json.dumps({"type": "webauthn.get", "challenge": b64url(challenge),
                             "origin": origin or self.origin, "crossOrigin": False}).encode()
        auth = hashlib.sha256(self.rp_id.encode()).digest() + bytes([_UP | (_UV if uv else 0)]) + struct.pack(
            ">I", count)
        signed = auth + hashlib.sha256(client).digest()
        if self.algorithm == -8:
            signature = self._key.sign(signed)
        else:
            signature = self._key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return {
            "id": self.credential_id, "rawId": self.credential_id, "type": "public-key",
            "response": {"clientDataJSON": b64url(client), "authenticatorData": b64url(auth),
                         "signature": b64url(signature), "userHandle": None},
            "clientExtensionResults": {}, "authenticatorAttachment": "platform",
        }
