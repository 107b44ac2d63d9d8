"""The kill switch's state as data: halts, quarantines, the drain, and their JSON.

Kept apart from :mod:`agent_saga.gate._switch` (which reads and writes it through a
store) so that every store — the file one there, the Redis one in
:mod:`agent_saga.gate._redis_store` — depends on this module and none on another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agent_saga.errors import ConfigurationError

__all__ = ["Halt", "Quarantine", "SwitchState", "parse_scope"]


def parse_scope(scope: str) -> str:
    """Normalise and validate a halt scope: ``global``, ``tool:NAME``, ``tool:prefix.*``, ``tag:X``."""
    if not isinstance(scope, str):
        raise ConfigurationError(f"a halt scope is a string such as 'tool:wire.send', got {scope!r}")
    text = scope.strip()
    if text in ("global", "*", "all"):
        return "global"
    kind, sep, name = text.partition(":")
    if sep and kind in ("tool", "tag") and name.strip():
        return f"{kind}:{name.strip()}"
    raise ConfigurationError(
        f"unknown halt scope {scope!r}: use 'global', 'tool:NAME', 'tool:prefix.*' or 'tag:NAME'"
    )


@dataclass(frozen=True, slots=True)
class Halt:
    """One halt (or the drain): what, who, why, when, and until when (wall-clock seconds)."""

    scope: str
    reason: str
    by: str
    at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


@dataclass(frozen=True, slots=True)
class Quarantine:
    saga_id: str
    reason: str
    by: str
    at: float


@dataclass(frozen=True, slots=True)
class SwitchState:
    """Everything the switch holds; what a store persists (as JSON)."""

    halts: tuple[Halt, ...] = ()
    drain: Halt | None = None
    quarantined: tuple[Quarantine, ...] = ()

    def live(self, now: float) -> SwitchState:
        """This state without the halts whose TTL has run out."""
        halts = tuple(h for h in self.halts if h.live(now))
        drain = self.drain if self.drain is not None and self.drain.live(now) else None
        return replace(self, halts=halts, drain=drain)

    @property
    def active(self) -> bool:
        return bool(self.halts or self.drain or self.quarantined)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "halts": [_halt_json(h) for h in self.halts],
            "drain": _halt_json(self.drain) if self.drain else None,
            "quarantined": [
                {"saga_id": q.saga_id, "reason": q.reason, "by": q.by, "at": q.at} for q in self.quarantined
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> SwitchState:
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a version-1 switch state")
        drain = data.get("drain")
        return cls(
            halts=tuple(Halt(**h) for h in data.get("halts", ())),
            drain=Halt(**drain) if drain else None,
            quarantined=tuple(Quarantine(**q) for q in data.get("quarantined", ())),
        )


def _halt_json(h: Halt) -> dict[str, Any]:
    return {"scope": h.scope, "reason": h.reason, "by": h.by, "at": h.at, "expires_at": h.expires_at}
