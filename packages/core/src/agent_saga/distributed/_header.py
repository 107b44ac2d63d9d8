"""The ``saga-context`` header: which saga and step a request belongs to, and its idempotency key.

Named and shaped like W3C ``traceparent``: one line of fixed length, dash-separated
lowercase hex fields, a version first::

    saga-context: 00-<saga: 32 hex>-<step: 8 hex>-<key: 32 hex>

* ``00`` — the version; the only one written or read here;
* ``saga`` — the caller's saga id (a saga named otherwise than 32 hex is sent as the first
  32 hex of its SHA-256, so the header never carries the caller's free text);
* ``step`` — the step's number in the caller's saga, 1 to ``ffffffff``;
* ``key`` — the step's idempotency key (its forward operation id).

77 characters, exactly. The parser refuses anything else with one line saying which rule
the value broke, never echoing the value: what arrives in a header is another party's data.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["HEADER", "LENGTH", "VERSION", "SagaContext", "SagaContextRefused", "parse_saga_context"]

HEADER = "saga-context"
VERSION = "00"
LENGTH = 77
_FORMAT = "00-<saga: 32 hex>-<step: 8 hex>-<key: 32 hex>"
_HEX32 = re.compile(r"[0-9a-f]{32}")
_VALUE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{8})-([0-9a-f]{32})")


class SagaContextRefused(ValueError):
    """A ``saga-context`` header that is not exactly the format; the message says which rule it broke."""


def _refused(why: str) -> SagaContextRefused:
    return SagaContextRefused(f"saga-context header refused: {why}; the format is {_FORMAT} ({LENGTH} characters)")


def saga_hex(saga_id: str) -> str:
    """``saga_id`` as the header carries it: itself when 32 lowercase hex, else 32 hex of its SHA-256."""
    if _HEX32.fullmatch(saga_id):
        return saga_id
    return hashlib.sha256(saga_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SagaContext:
    """One remote step's context: the caller's saga, the step's number and its idempotency key."""

    saga: str
    step: int
    key: str

    def __post_init__(self) -> None:
        if not isinstance(self.saga, str) or not _HEX32.fullmatch(self.saga):
            raise ValueError("SagaContext.saga must be 32 lowercase hex characters (see saga_hex)")
        if type(self.step) is not int or not 1 <= self.step <= 0xFFFFFFFF:
            raise ValueError("SagaContext.step must be an int from 1 to 4294967295")
        if not isinstance(self.key, str) or not _HEX32.fullmatch(self.key):
            raise ValueError("SagaContext.key must be 32 lowercase hex characters (an operation id)")

    def header(self) -> str:
        """The header's value."""
        return f"{VERSION}-{self.saga}-{self.step:08x}-{self.key}"


def parse_saga_context(value: str | bytes) -> SagaContext:
    """The context a ``saga-context`` value carries; :class:`SagaContextRefused` for anything else.

    ``bytes`` as a server receives them (ASGI) or ``str``. Refused: a value that is not
    ASCII, not exactly 77 characters, another version, not the four lowercase-hex fields,
    or step 0. Surrounding whitespace is not trimmed: the value is the value.
    """
    if isinstance(value, bytes):
        if len(value) != LENGTH:
            raise _refused(f"it is {len(value)} bytes long")
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            raise _refused("it is not ASCII") from None
    elif isinstance(value, str):
        text = value
        if len(text) != LENGTH:
            raise _refused(f"it is {len(text)} characters long")
        if not text.isascii():
            raise _refused("it is not ASCII")
    else:
        raise _refused(f"it is a {type(value).__name__}, not text")
    match = _VALUE.fullmatch(text)
    if match is None:
        raise _refused("its fields are not lowercase hex separated by '-'")
    version, saga, step, key = match.groups()
    if version != VERSION:
        raise _refused(f"version {version} is not {VERSION}, the only version this library reads")
    number = int(step, 16)
    if number == 0:
        raise _refused("step 00000000 does not exist (steps are numbered from 1)")
    return SagaContext(saga, number, key)
