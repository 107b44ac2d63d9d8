"""Encryption at rest for the write-ahead log (``pip install 'agent-saga[encryption]>=3.0.0'``).

Bring your own key: 16, 24 or 32 random bytes, base64-encoded in
``$AGENT_SAGA_WAL_KEY`` or handed to :class:`AESGCMEncryptor`. Each body is
sealed with AES-GCM under a fresh 96-bit nonce and bound (as associated data) to
its record's saga, seq and type, so a ciphertext moved to another record does not
decrypt. Headers stay in clear: the chain, the sequence and the timing remain
verifiable by an auditor who holds no key, which is the point of a chain.

``cryptography`` is imported only when an encryptor is built.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from agent_saga.errors import WALError
from agent_saga.log.codec import BodyCipher, encryption_aad
from agent_saga.log.records import Record

__all__ = [
    "KEY_ENV",
    "AESGCMEncryptor",
    "EncryptionError",
    "EncryptionKeyMissing",
    "EncryptionKeyWrong",
    "generate_key",
    "open_record",
]

KEY_ENV = "AGENT_SAGA_WAL_KEY"
_INSTALL = "pip install 'agent-saga[encryption]>=3.0.0'"


class EncryptionError(WALError):
    """An encrypted log could not be written or read."""


class EncryptionKeyMissing(EncryptionError):
    """A record is encrypted and no key was given."""


class EncryptionKeyWrong(EncryptionError):
    """A record does not decrypt with the key given (wrong key, or tampered ciphertext)."""


def generate_key(size: int = 32) -> str:
    """A fresh random key, base64-encoded, ready for ``$AGENT_SAGA_WAL_KEY``."""
    if size not in (16, 24, 32):
        raise ValueError(f"AES keys are 16, 24 or 32 bytes, not {size}")
    return base64.b64encode(os.urandom(size)).decode()


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as err:
        raise ImportError(
            f"encrypting the log needs the 'cryptography' package: {_INSTALL}"
        ) from err
    return AESGCM


class AESGCMEncryptor:
    """AES-GCM over record bodies. Tokens read ``<key id>:<base64(nonce || ciphertext)>``.

    The key id (8 hex characters of SHA-256 over the key) lets a reader say
    *which* key a record needs without revealing anything about the key.
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
            got = f"{len(key)} bytes" if isinstance(key, bytes) else type(key).__name__
            raise ValueError(
                f"an AES key is 16, 24 or 32 raw bytes, got {got}; "
                "make one with agent_saga.log.crypto.generate_key()"
            )
        self._aead = _aesgcm()(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:8]

    @classmethod
    def from_base64(cls, text: str) -> AESGCMEncryptor:
        try:
            key = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError) as err:
            raise ValueError(f"the WAL key is not valid base64 ({err}); generate one with generate_key()") from None
        return cls(key)

    @classmethod
    def from_env(cls, var: str = KEY_ENV) -> AESGCMEncryptor:
        text = os.environ.get(var, "")
        if not text:
            raise EncryptionKeyMissing(f"${var} is not set; export a base64 key (see generate_key())")
        try:
            return cls.from_base64(text)
        except ValueError as err:
            raise ValueError(f"${var}: {err}") from None

    def encrypt(self, plaintext: bytes, aad: bytes) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext, aad)
        return f"{self.key_id}:{base64.b64encode(nonce + sealed).decode()}"

    def decrypt(self, token: str, aad: bytes) -> bytes:
        kid, _, payload = token.partition(":")
        if kid != self.key_id:
            raise EncryptionKeyWrong(f"encrypted with key {kid}, but the key given is {self.key_id}")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionKeyWrong("the ciphertext is not valid base64 (damaged record)") from None
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(self._aead.decrypt(raw[:12], raw[12:], aad))
        except InvalidTag:
            raise EncryptionKeyWrong(
                f"does not authenticate under key {self.key_id} (ciphertext altered or moved)"
            ) from None

    def __repr__(self) -> str:
        return f"AESGCMEncryptor(key_id={self.key_id!r})"


def open_record(record: Record, encryptor: BodyCipher | None, where: Path | str = "log") -> Record:
    """A copy of an encrypted ``record`` with its ``body`` decrypted (``enc`` is kept).

    Fails loudly: a reader that met an encrypted record and returned it without a
    body would let a recovery pass treat a charge as a record with nothing in it.
    """
    token = record.get("enc")
    seq = record.get("seq")
    if not isinstance(token, str):
        raise EncryptionError(f"{where}: record seq {seq} has a malformed 'enc' field")
    if encryptor is None:
        if not os.environ.get(KEY_ENV):
            raise EncryptionKeyMissing(
                f"{where}: record seq {seq} is encrypted (key {token.partition(':')[0]}); set "
                f"${KEY_ENV} to the base64 key or pass encryptor= to read it"
            )
        encryptor = AESGCMEncryptor.from_env()
    aad = encryption_aad(str(record.get("saga")), int(seq or 0), str(record.get("type")))
    try:
        plain = encryptor.decrypt(token, aad)
    except EncryptionKeyWrong as err:
        raise EncryptionKeyWrong(f"{where}: record seq {seq} {err}") from None
    opened = dict(record)
    opened["body"] = json.loads(plain)
    return opened
