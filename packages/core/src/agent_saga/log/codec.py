"""Canonical encoding and the hash chain.

Canonical means: UTF-8 JSON, keys sorted, no insignificant whitespace, no NaN. The
same value always encodes to the same bytes, so a digest taken today can be
re-taken by an auditor years from now.

Chain rule (also written, in prose, into every export manifest):

* ``digest = SHA-256(salt || canonical(body))`` where ``salt`` is the 16 random
  bytes whose hex is stored beside the body;
* ``hash = SHA-256(canonical(header))`` where the header is the record's
  ``digest, prev, saga, seq, step, ts, type`` (those present);
* ``prev`` of a record is the ``hash`` of the record before it (64 zeros first).

Erasing ``body`` and ``salt`` leaves the header, so the chain still verifies while
the content becomes irrecoverable.

An encrypted record (``FileWAL(encryptor=...)``) stores the ciphertext in ``enc``
instead of ``body``, and its digest is ``SHA-256(salt || enc)`` over that stored
text, so the chain can be verified by someone who does not hold the key.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import reprlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from agent_saga.errors import WALRefused
from agent_saga.log.encodable import MAX_INT_DIGITS, unencodable, utf8_safe
from agent_saga.log.records import HEADER_FIELDS, Record

__all__ = [
    "BodyCipher", "canonical", "chain_hash", "chain_lines", "content_digest", "decode_line", "encode_entry",
    "encryption_aad", "prepare_lines", "seal",
]


class BodyCipher(Protocol):
    """What ``seal`` needs to encrypt bodies (see ``agent_saga.log.crypto``)."""

    def encrypt(self, plaintext: bytes, aad: bytes) -> str:
        """Return the ciphertext as JSON-safe ASCII text."""
        ...

    def decrypt(self, token: str, aad: bytes) -> bytes:
        """Invert :meth:`encrypt`; raise if the key or the associated data do not match."""
        ...


def encryption_aad(saga: str, seq: int, rtype: str) -> bytes:
    """The associated data an encrypted body is bound to: moving it to another record fails."""
    return f"agent-saga/v1\x1f{saga}\x1f{seq}\x1f{rtype}".encode()


# Values the log shows by their text, as "<datetime 2026-12-06T10:00:00+00:00>": exact types
# only, so no code of the agent's (a subclass's isoformat or __str__) runs on the flusher thread.
_SHOWN: dict[type, Any] = {
    datetime.datetime: datetime.datetime.isoformat, datetime.date: datetime.date.isoformat,
    datetime.time: datetime.time.isoformat, uuid.UUID: uuid.UUID.__str__,
    Decimal: Decimal.__str__,  # an amount by value, exactly as written: "<Decimal 1E+4>"
}


def _fallback(value: object) -> str:
    # The log must never fail to encode (a failure on the flusher thread would
    # break durability for every saga); callers sanitize, this is the last resort.
    show = _SHOWN.get(type(value))
    if show is not None:
        return f"<{type(value).__name__} {show(value)}>"
    return f"<{type(value).__name__}>"


_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_fallback
)
# The C encoder, built once: JSONEncoder.encode rebuilds it on every call, which
# doubles the flusher's cost per record. Same output (it is what encode uses).
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_encoder is not None:
    _c_encode = _c_encoder(
        None, _fallback, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )

    def canonical(value: Any) -> str:
        """The canonical JSON text of ``value``."""
        return "".join(_c_encode(value, 0))
else:  # pragma: no cover - CPython always has the C accelerator

    def canonical(value: Any) -> str:
        """The canonical JSON text of ``value``."""
        return _encoder.encode(value)


# One function under both names: canonical() was a call to _encode, a call more for each part a
# durable step's records join (engine/durable_record.py).
_encode = canonical


def content_digest(salt_hex: str, body_json: str) -> str:
    """SHA-256 over the salt bytes and the canonical body."""
    return hashlib.sha256(bytes.fromhex(salt_hex) + body_json.encode()).hexdigest()


def chain_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 over the canonical header of ``record``."""
    header = {k: record[k] for k in HEADER_FIELDS if k in record}
    return hashlib.sha256(_encode(header).encode()).hexdigest()


# ts, type, saga, step, body; a body given as a str is its canonical JSON, already
# encoded (and checked) by encode_entry when it was appended.
_Entry = tuple[int, str, str, "int | None", "Mapping[str, Any] | str"]
_Prepared = tuple[str, str, str, str]  # the pieces of a line around its prev, seq and hash


_encode_string = json.encoder.encode_basestring  # what the canonical encoder uses for a str


def _string(value: Any) -> str:
    # Saga ids and record types are str (or a StrEnum): the C string encoder alone.
    return _encode_string(value) if isinstance(value, str) else _encode(value)


def _body_json(body: Mapping[str, Any] | str) -> str:
    return body if type(body) is str else _encode(body)


_STEP_LIMIT = 10**MAX_INT_DIGITS  # what unencodable() accepts of an int, compared in place


def encode_entry(rtype: Any, saga: Any, step: Any, body: Mapping[str, Any]) -> str:
    """The canonical JSON of ``body``, or WALRefused naming what cannot be encoded.

    Called by a writer's ``append``, on the caller's thread: a record that cannot be
    encoded is refused to the one caller that brought it, instead of failing the
    flush that seals it together with every other saga's records (which breaks the
    log for all of them). The header's parts are checked too: the type and saga
    must be text, the step an int.
    """
    if not (type(saga) is str and saga.isascii() and isinstance(rtype, str) and rtype.isascii()):
        for name, text in (("type", rtype), ("saga", saga)):
            if not isinstance(text, str) or utf8_safe(text) != text:
                raise WALRefused(f"record refused: its {name} must be valid text, got {text!r}; nothing was written")
    if step is not None and (type(step) is not int or not -_STEP_LIMIT < step < _STEP_LIMIT):
        # Not repr() of an int the log cannot hold: Python refuses to write out one that long.
        got = f"an int of {step.bit_length()} bits" if type(step) is int else reprlib.repr(step)
        raise WALRefused(
            f"record refused: its step must be an int of at most {MAX_INT_DIGITS} digits or None, got {got}; "
            "nothing was written"
        )
    try:
        body_json = _encode(body)
        if not body_json.isascii():
            body_json.encode()  # a lone surrogate passes json, not UTF-8
    except (ValueError, TypeError, RecursionError) as err:
        problem = unencodable(body, "body") or f"body cannot be encoded ({type(err).__name__}: {err})"
        raise WALRefused(
            f"record refused ({rtype} of saga {utf8_safe(str(saga))}): {problem}. Nothing was written; "
            "the log is intact"
        ) from None
    return body_json


def prepare_lines(entries: Sequence[_Entry]) -> list[_Prepared]:
    """Everything of each chained line that does not depend on its place in the log.

    The body's encoding, its salt and digest: the costly part of sealing, done
    before the file lock is taken so that other writers wait only for :func:`chain_lines`.
    """
    out: list[_Prepared] = []
    salts = os.urandom(16 * len(entries))
    salts_hex = salts.hex()
    sha256 = hashlib.sha256
    for i, (ts, rtype, saga, step, body) in enumerate(entries):
        body_json = body if type(body) is str else _encode(body)
        salt = salts_hex[32 * i : 32 * i + 32]
        digest = sha256(salts[16 * i : 16 * i + 16] + body_json.encode()).hexdigest()
        step_json = "" if step is None else f'"step":{step:d},'
        out.append((
            f'{{"digest":"{digest}","prev":"',
            f'","saga":{_string(saga)},"seq":',
            f',{step_json}"ts":{ts:d},"type":{_string(rtype)}',
            f',"body":{body_json},"salt":"{salt}","hash":"',
        ))
    return out


def chain_lines(prepared: Sequence[_Prepared], first_seq: int, prev: str) -> tuple[bytes, str]:
    """Number and chain prepared records from ``first_seq`` after ``prev``: the log lines, the last hash.

    The header is formatted by hand in canonical (sorted-key) order; a test checks
    that it equals ``canonical`` of the same fields.
    """
    out: list[str] = []
    sha256 = hashlib.sha256
    for seq, (before_prev, before_seq, after_seq, tail) in enumerate(prepared, first_seq):
        header = f"{before_prev}{prev}{before_seq}{seq:d}{after_seq}"
        prev = sha256(f"{header}}}".encode()).hexdigest()
        out.append(f'{header}{tail}{prev}"}}\n')
    return "".join(out).encode(), prev


def seal(
    entries: Iterable[tuple[int, int, str, str, int | None, Mapping[str, Any] | str]],
    prev: str,
    chain: bool = True,
    cipher: BodyCipher | None = None,
) -> tuple[bytes, str, int]:
    """Encode ``(seq, ts, type, saga, step, body)`` entries into log lines.

    Returns the bytes to append, the last record's hash (``prev`` of the next
    batch) and how many records were sealed. With ``cipher``, each body is
    stored encrypted in ``enc``. The entries' seqs must be consecutive.
    """
    if cipher is not None:
        return _seal_encrypted(entries, prev, chain, cipher)
    if not chain:
        return _seal_unchained(entries, prev)
    listed = list(entries)
    if not listed:
        return b"", prev, 0
    data, prev = chain_lines(prepare_lines([entry[1:] for entry in listed]), listed[0][0], prev)
    return data, prev, len(listed)


def _seal_unchained(
    entries: Iterable[tuple[int, int, str, str, int | None, Mapping[str, Any] | str]], prev: str
) -> tuple[bytes, str, int]:
    out: list[str] = []
    for seq, ts, rtype, saga, step, body in entries:
        header: dict[str, Any] = {"saga": saga, "seq": seq, "ts": ts, "type": rtype}
        if step is not None:
            header["step"] = step
        out.append(f'{_encode(header)[:-1]},"body":{_body_json(body)}}}\n')
    return "".join(out).encode(), prev, len(out)


def _seal_encrypted(
    entries: Iterable[tuple[int, int, str, str, int | None, Mapping[str, Any] | str]],
    prev: str,
    chain: bool,
    cipher: BodyCipher,
) -> tuple[bytes, str, int]:
    # Kept apart from seal's loop so the plaintext path pays nothing for encryption.
    out: list[str] = []
    entries = list(entries)
    sha256 = hashlib.sha256
    for seq, ts, rtype, saga, step, body in entries:
        token = cipher.encrypt(_body_json(body).encode(), encryption_aad(saga, seq, rtype))
        header: dict[str, Any] = {"saga": saga, "seq": seq, "ts": ts, "type": rtype}
        if step is not None:
            header["step"] = step
        enc_json = _encode(token)
        if not chain:
            out.append(f'{_encode(header)[:-1]},"enc":{enc_json}}}\n')
            continue
        salt = os.urandom(16).hex()
        header["digest"] = sha256(bytes.fromhex(salt) + token.encode()).hexdigest()
        header["prev"] = prev
        header_json = _encode(header)
        prev = sha256(header_json.encode()).hexdigest()
        out.append(f'{header_json[:-1]},"enc":{enc_json},"salt":"{salt}","hash":"{prev}"}}\n')
    return "".join(out).encode(), prev, len(out)


def decode_line(line: bytes | str) -> Record:
    """Parse one log line into a record dict (raises ValueError on malformed input)."""
    record = json.loads(line)
    if not isinstance(record, dict) or "seq" not in record or "type" not in record:
        raise ValueError("not a log record (needs at least 'seq' and 'type')")
    return record
