"""Speculation leases: a held result may be redeemed only by the call it was run for.

A lease is an HMAC-SHA256, under a key the runtime draws at random and keeps in
memory (never written to the log, never handed to the agent), over the canonical
JSON (``agent_saga.log.codec.canonical``) of: the lease id, the intent, the saga id,
the tool, the SHA-256 of the call's canonical arguments and the expiry. Redeeming
checks the tag and then each binding against the call being made now: a lease that
is stale, forged (a tag not made with this key), altered (any field changed after
it was issued), or presented for another intent, saga, tool or arguments is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_saga.log.codec import canonical
from agent_saga.log.encodable import unencodable

__all__ = ["LeaseSigner", "SpeculationLease", "args_digest"]


def args_digest(args: Mapping[str, Any]) -> str | None:
    """SHA-256 of the canonical JSON of a call's arguments; None when the log could not hold them.

    The canonical encoder writes an object it does not know as its type's name, so
    two different such objects would share a digest: those calls are never speculated.
    ``5`` and ``5.0`` (and ``True`` and ``1``) stay distinct: a tool may tell them apart.
    """
    if unencodable(dict(args), "args") is not None:
        return None
    return hashlib.sha256(canonical(dict(args)).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class SpeculationLease:
    """What a speculation is held behind; ``tag`` is the HMAC over every other field."""

    lease_id: str
    intent: str
    saga_id: str
    tool: str
    args_digest: str
    expires: float
    tag: str

    def body(self) -> dict[str, Any]:
        """The fields the tag covers (the tag itself left out)."""
        return {
            "id": self.lease_id, "intent": self.intent, "saga": self.saga_id, "tool": self.tool,
            "args": self.args_digest, "expires": self.expires,
        }


class LeaseSigner:
    """Issues and checks leases under one in-memory key (a fresh random one unless given)."""

    def __init__(self, *, clock: Callable[[], float], key: bytes | None = None) -> None:
        if key is not None and (not isinstance(key, bytes) or len(key) < 32):
            raise ValueError("LeaseSigner(key=...) takes at least 32 random bytes, or None for a fresh key")
        self._key = key if key is not None else secrets.token_bytes(32)
        self._clock = clock

    def __repr__(self) -> str:
        return "LeaseSigner(key=<held in memory>)"  # the key is never shown

    def _mac(self, body: Mapping[str, Any]) -> str:
        return hmac.new(self._key, canonical(dict(body)).encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def issue(self, *, intent: str, saga_id: str, tool: str, digest: str, ttl: float) -> SpeculationLease:
        """A lease for one speculated call, valid for ``ttl`` seconds from now."""
        unsigned = SpeculationLease(secrets.token_hex(8), intent, saga_id, tool, digest, self._clock() + ttl, "")
        return dataclasses.replace(unsigned, tag=self._mac(unsigned.body()))

    def refusal(self, lease: SpeculationLease, *, intent: str, saga_id: str, tool: str, digest: str | None) -> str | None:
        """Why ``lease`` may not be redeemed by this call now, or None when it may."""
        tag: Any = lease.tag  # a lease built by hand may hold anything
        try:
            expected = self._mac(lease.body())
        except (TypeError, ValueError):
            return "not a lease"
        if not isinstance(tag, str) or not hmac.compare_digest(expected.encode(), _bytes(tag)):
            return "forged or altered (the tag does not match)"
        if lease.saga_id != saga_id:
            return "issued for another saga"
        if lease.intent != intent:
            return "issued for another intent"
        if lease.tool != tool:
            return "issued for another tool"
        if digest is None or lease.args_digest != digest:
            return "issued for other arguments"
        if not self._clock() < lease.expires:
            return "expired"
        return None


def _bytes(text: str) -> bytes:
    # compare_digest refuses a non-ASCII str: compare bytes, so any text is merely unequal.
    return text.encode("utf-8", "surrogatepass")
