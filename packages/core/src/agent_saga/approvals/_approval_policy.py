"""How long a request may wait, and who is asked when: ApprovalPolicy and EscalationLevel."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent_saga.errors import ConfigurationError

__all__ = ["DEFAULT_POLL_INTERVAL", "ApprovalPolicy", "EscalationLevel"]

DEFAULT_POLL_INTERVAL = 1.0


def _seconds(value: object, what: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigurationError(f"{what} must be {'greater than' if positive else 'at least'} 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class EscalationLevel:
    """Who is asked, and how many seconds after the request was made.

    ``targets`` are free-form handles (``"@oncall"``, an e-mail, a channel) that
    the notifier puts in front of the people; the first level is usually asked at
    once (``after_seconds=0``).
    """

    targets: tuple[str, ...]
    after_seconds: float = 0.0

    def __post_init__(self) -> None:
        targets: object = self.targets  # checked at run time: callers pass anything
        if isinstance(targets, str):
            raise ConfigurationError(
                f"targets= takes a tuple of handles, e.g. targets=({targets!r},), not the string {targets!r}"
            )
        if not isinstance(targets, (tuple, list)) or not targets or not all(
            isinstance(t, str) and t.strip() for t in targets
        ):
            raise ConfigurationError(
                f"targets= must name at least one person or channel, e.g. targets=('@oncall',), got {targets!r}"
            )
        object.__setattr__(self, "targets", tuple(targets))
        object.__setattr__(
            self, "after_seconds", _seconds(self.after_seconds, "EscalationLevel(after_seconds=)", positive=False)
        )


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """A mandatory deadline and the escalation chain.

    ``timeout``: seconds from the request until it expires, which denies. There
    is no default and no "wait forever": an unanswered request would hold the
    saga, its lease and whatever it reserved open indefinitely.
    ``levels``: asked in order, each ``after_seconds`` after the request; each
    must start before the deadline. ``poll_interval``: how often a waiting saga
    reads the store for a decision. ``require_passkey``: ``True`` makes every grant
    need a person's passkey (a WebAuthn assertion over this very action, see
    :mod:`agent_saga.approvals._passkey`), a tuple of rule names makes only those
    rules' grants need one; an Ed25519-signed grant (the CLI's, break-glass included)
    is then refused for them.
    """

    timeout: float
    levels: tuple[EscalationLevel, ...] = (EscalationLevel(("approvers",)),)
    poll_interval: float = DEFAULT_POLL_INTERVAL
    require_passkey: bool | tuple[str, ...] = False

    def __post_init__(self) -> None:
        timeout = _seconds(self.timeout, "ApprovalPolicy(timeout=)", positive=True)
        object.__setattr__(self, "timeout", timeout)
        object.__setattr__(
            self, "poll_interval", _seconds(self.poll_interval, "ApprovalPolicy(poll_interval=)", positive=True)
        )
        levels: object = self.levels
        if isinstance(levels, EscalationLevel):
            levels = (levels,)
        if not isinstance(levels, (tuple, list)) or not levels:
            raise ConfigurationError(
                "levels= must hold at least one EscalationLevel, e.g. levels=(EscalationLevel(targets=('@oncall',)),)"
            )
        previous = 0.0
        for i, level in enumerate(levels):
            if not isinstance(level, EscalationLevel):
                raise ConfigurationError(f"levels[{i}] must be an EscalationLevel, got {level!r}")
            if level.after_seconds < previous:
                raise ConfigurationError(
                    f"levels[{i}] starts after {level.after_seconds:g}s, before the level above it "
                    f"({previous:g}s): list the levels in the order they are asked"
                )
            if level.after_seconds >= timeout:
                raise ConfigurationError(
                    f"levels[{i}] would be asked after {level.after_seconds:g}s, but the request expires "
                    f"after timeout={timeout:g}s: nobody would ever be asked; raise timeout or lower after_seconds"
                )
            previous = level.after_seconds
        object.__setattr__(self, "levels", tuple(levels))
        object.__setattr__(self, "require_passkey", _passkey_rules(self.require_passkey))

    def needs_passkey(self, rule: str) -> bool:
        """Whether a grant for a request made under ``rule`` must carry a passkey assertion."""
        wanted = self.require_passkey
        return wanted if isinstance(wanted, bool) else rule in wanted


def _passkey_rules(value: object) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        raise ConfigurationError(
            f"require_passkey= takes True or a tuple of rule names, e.g. require_passkey=({value!r},), "
            f"not the string {value!r}"
        )
    if isinstance(value, (tuple, list, frozenset, set)) and value and all(
        isinstance(r, str) and r.strip() for r in value
    ):
        return tuple(sorted(value))
    raise ConfigurationError(
        f"require_passkey= must be True, False or a non-empty tuple of rule names (e.g. ('refunds',)), got {value!r}"
    )
