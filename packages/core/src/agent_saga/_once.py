"""A process-wide object made on first use: the plugin manager, the lease keeper, the limit store.

Each is made when something first asks for it rather than at import (``import agent_saga``
stays light), and at most once however many threads ask at the same moment: two lease
keepers would each renew the same leases, two plugin managers would each see half the plugins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["FirstUse"]

T = TypeVar("T")


class FirstUse(Generic[T]):
    """Holds the one ``T`` of this process, made by ``make()`` when :meth:`get` first needs it."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self) -> T:
        """The object, made now if nobody made it yet (or it was replaced by None)."""
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value

    @property
    def made(self) -> T | None:
        """The object if it was made already; None otherwise (asking never makes it)."""
        return self._value

    def replace(self, value: T | None) -> T | None:
        """Put ``value`` in its place (None: make a new one on the next :meth:`get`); returns the old one."""
        with self._lock:
            old, self._value = self._value, value
            return old
