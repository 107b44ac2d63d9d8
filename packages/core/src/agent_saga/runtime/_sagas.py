"""Per-saga memory for a gate check, bounded so that a long-lived gate does not grow forever."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerSaga"]

T = TypeVar("T")


class PerSaga(Generic[T]):
    """``with memory.lock: state = memory.get(saga_id)`` -- one saga's state, the oldest forgotten past ``keep``.

    The gate never hears that a saga ended, so the sagas it remembers are the ``keep``
    most recently seen; a saga idle while ``keep`` others ran starts afresh.
    """

    def __init__(self, new: Callable[[], T], keep: int = 4096) -> None:
        self._new = new
        self._keep = keep
        self._states: OrderedDict[str, T] = OrderedDict()
        self.lock = threading.Lock()  # callers hold it while they read and change a state

    def get(self, saga_id: str) -> T:
        """The state of ``saga_id`` (call with ``lock`` held)."""
        state = self._states.get(saga_id)
        if state is None:
            state = self._states[saga_id] = self._new()
            while len(self._states) > self._keep:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(saga_id)
        return state
