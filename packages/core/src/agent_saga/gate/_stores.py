"""Where spend and rate windows live: the limit-store interface and the in-process store.

A store does one thing that matters: check every limit a call touches and debit
all of them, or none, in one indivisible step. Splitting it into "read the total"
then "write the new total" would let two callers both read $49k, both decide $1k
fits, and both spend.

The in-process :class:`MemoryLimitStore` is the default. It is exact inside one
process and wrong across several: each process grants the full allowance, so N
processes spend N times the budget, and a restarted process starts its windows
fresh. Anything running more than one process (or crash-looping) needs a shared
store -- :class:`agent_saga.gate.RedisLimitStore`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agent_saga._once import FirstUse
from agent_saga.errors import ConfigurationError, SagaError

__all__ = [
    "Charge",
    "DebitResult",
    "LimitStore",
    "MemoryLimitStore",
    "Mode",
    "Receipt",
    "StoreUnavailable",
    "fits",
    "get_limit_store",
    "set_limit_store",
]

Mode = Literal["check", "escalate", "force"]


class StoreUnavailable(SagaError):
    """A gate store (limits, breaker state, kill switch) could not be reached or read."""


@dataclass(frozen=True, slots=True)
class Charge:
    """One limit's share of a call: debit ``amount`` from window ``key``.

    ``mode``: ``check`` refuses when over ``max_total``; ``escalate`` reports the
    overrun instead of refusing (a human may still approve); ``force`` debits
    without checking (an approved escalation).
    """

    key: str
    max_total: float
    window: float
    amount: float
    mode: Mode = "check"


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a debit wrote, so that exactly that can be handed back."""

    entries: tuple[tuple[str, str, float], ...] = ()  # (key, entry id, amount)

    def __add__(self, other: Receipt) -> Receipt:
        return Receipt(self.entries + other.entries)


@dataclass(frozen=True, slots=True)
class DebitResult:
    """``refused`` is the index of the first charge that did not fit (nothing was debited).

    Otherwise every charge except the ``deferred`` ones (escalations over their
    limit, left for a human) was debited, as recorded in ``receipt``.
    """

    refused: int | None
    total: float = 0.0
    deferred: tuple[int, ...] = ()
    receipt: Receipt = Receipt()


@runtime_checkable
class LimitStore(Protocol):
    """Atomic check-and-debit across several windows, and its undo for a refusal."""

    location: str

    def debit(self, charges: Sequence[Charge]) -> DebitResult:
        """All-or-nothing; raises StoreUnavailable when the store cannot answer."""
        ...

    def refund(self, receipt: Receipt) -> None:
        """Hand back exactly what ``receipt`` debited (entries already expired are skipped)."""
        ...


def fits(total: float, amount: float, max_total: float) -> bool:
    """Whether ``amount`` fits on top of ``total``; tolerant of float rounding in the running sum."""
    return total + amount <= max_total + 1e-9 * max(1.0, abs(max_total))


class _Window:
    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[tuple[float, str, float]] = deque()  # (time, id, amount), oldest first
        self.total = 0.0

    def expire(self, now: float, window: float) -> None:
        entries = self.entries
        while entries and entries[0][0] <= now - window:
            self.total -= entries.popleft()[2]
        if not entries:
            self.total = 0.0  # drop accumulated rounding once the window is empty


class MemoryLimitStore:
    """Sliding windows in this process (the default). See the module docstring for its limits."""

    location = "memory"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def debit(self, charges: Sequence[Charge]) -> DebitResult:
        token = uuid.uuid4().hex
        with self._lock:
            now = self._clock()
            deferred: list[int] = []
            for index, charge in enumerate(charges):
                win = self._windows.setdefault(charge.key, _Window())
                win.expire(now, charge.window)
                if charge.mode != "force" and not fits(win.total, charge.amount, charge.max_total):
                    if charge.mode == "escalate":
                        deferred.append(index)
                    else:
                        return DebitResult(index, win.total)
            entries = []
            for index, charge in enumerate(charges):
                if index in deferred:
                    continue
                entry = f"{token}:{index}"
                win = self._windows[charge.key]
                win.entries.append((now, entry, charge.amount))
                win.total += charge.amount
                entries.append((charge.key, entry, charge.amount))
            return DebitResult(None, 0.0, tuple(deferred), Receipt(tuple(entries)))

    def refund(self, receipt: Receipt) -> None:
        with self._lock:
            for key, entry, amount in receipt.entries:
                win = self._windows.get(key)
                if win is None:
                    continue
                for item in win.entries:
                    if item[1] == entry:
                        win.entries.remove(item)
                        win.total -= amount
                        break

    def __repr__(self) -> str:
        return "MemoryLimitStore()"


_store: FirstUse[LimitStore] = FirstUse(MemoryLimitStore)


def set_limit_store(store: LimitStore | None) -> None:
    """The store every limit uses unless its gate was given one; None restores the in-process default."""
    if store is not None and not isinstance(store, LimitStore):
        raise ConfigurationError(
            f"set_limit_store() needs a limit store (MemoryLimitStore, RedisLimitStore), got {store!r}"
        )
    _store.replace(store)


def get_limit_store() -> LimitStore:
    """The process-wide limit store (created on first use)."""
    return _store.get()
