"""A process-local drain: know which sagas run here, and refuse new ones while stopping.

:class:`OpenSagas` is an interceptor, so it sees every saga this process starts
whatever the front door. :class:`DrainGate` wraps the default gate (the one every
saga gets unless its boundary names another): while the process drains it refuses
new sagas at admission, before anything is written or done, and otherwise passes
everything to the gate it wraps. A saga whose boundary was given its own gate does
not consult the default one, so it is not refused; it is still waited for.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_saga.context import GateSetting, set_default_gate
from agent_saga.engine.observe import Interceptor, SagaEvent, Wrapper, add_interceptor, remove_interceptor
from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest
from agent_saga.errors import StepRefused

__all__ = ["Drain", "DrainGate", "OpenSagas"]


class OpenSagas(Interceptor):
    """The ids of the sagas started in this process and not yet ended."""

    def __init__(self) -> None:
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def saga(self, event: SagaEvent) -> Wrapper:
        with self._lock:
            self._open.add(event.saga_id)
        try:
            yield
        finally:
            with self._lock:
                self._open.discard(event.saga_id)

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._open)


class DrainGate:
    """The default gate, unless the process drains: then new sagas are refused."""

    def __init__(self, inner: GatePort | None, drain: Drain) -> None:
        self.inner = inner
        self._drain = drain

    def admit(self, saga: SagaInfo) -> None:
        if self._drain.draining:
            raise StepRefused(
                f"saga:{saga.name}", "this process is shutting down and takes no new sagas; retry on another replica",
                "drain",
            )
        if self.inner is not None:
            self.inner.admit(saga)

    def check(self, request: StepRequest) -> None:
        if self.inner is not None:
            self.inner.check(request)

    async def check_async(self, request: StepRequest) -> None:
        if self.inner is not None:
            await self.inner.check_async(request)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        if self.inner is not None:
            self.inner.observe(request, error)

    def posture(self) -> Any:
        """The wrapped gate's posture, for the start record (None when there is no gate)."""
        if self.inner is None:
            return None
        posture = getattr(self.inner, "posture", None)
        return posture() if callable(posture) else {"type": type(self.inner).__name__}

    @property
    def switch(self) -> Any:
        """The wrapped gate's kill switch, so ``switch_posture`` and readiness see through the wrapper."""
        return getattr(self.inner, "switch", None)


class Drain:
    """Installed while a service runs: the open-saga count and the wrapped default gate."""

    def __init__(self) -> None:
        self.draining = False
        self.open = OpenSagas()
        self._previous: GateSetting = None
        self._installed = False

    def install(self) -> None:
        add_interceptor(self.open)
        self._previous = set_default_gate(self._gate)
        self._installed = True

    def _gate(self) -> GatePort:
        previous = self._previous
        inner = previous() if callable(previous) and not isinstance(previous, GatePort) else previous
        return DrainGate(inner, self)

    def uninstall(self) -> None:
        if not self._installed:
            return
        self._installed = False
        set_default_gate(self._previous)
        remove_interceptor(self.open)
