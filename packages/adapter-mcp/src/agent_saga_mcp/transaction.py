"""One transaction of the proxy: the core's :class:`~agent_saga.Boundary`, held across tasks.

The proxy cannot write ``async with Boundary(...)`` around a transaction: the call that
opens it, the calls that run in it, and the end of it (the client's EOF, a
``saga_rollback``) are handled by different tasks. A boundary makes its saga current in
the context it is entered in and restores that context when it is left, so both must
happen in the same context: a :class:`Transaction` enters and leaves its boundary in a
context of its own. Leaving it is the boundary's own commit or rollback. Not leaving it
at all (the server went away, the proxy was killed) leaves the saga open, for the
recovery daemon.

A call belongs to the transaction that was current when the client sent it, whatever task
runs it: :meth:`Transaction.expect` notes it then, and its end (:meth:`Transaction.arrived`)
waits until every such call has reached the saga (its step opened, so the saga's own end
waits for it within ``rollback_grace``), or ended before it.
"""

from __future__ import annotations

import asyncio
import contextvars

from agent_saga import Boundary, RollbackReport, Saga, SagaAborted
from agent_saga.engine import SagaStatus

__all__ = ["Transaction"]


class Transaction:
    """A boundary entered by :meth:`open` and left by :meth:`commit` or :meth:`roll_back`."""

    def __init__(self, boundary: Boundary) -> None:
        self._boundary = boundary
        self._context = contextvars.copy_context()
        self.saga: Saga | None = None
        self._expected: list[asyncio.Future[None]] = []

    def expect(self) -> asyncio.Future[None]:
        """A call of this transaction was received: set the future once its step is in the saga (or it ended)."""
        arrival: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._expected.append(arrival)
        return arrival

    async def arrived(self) -> None:
        """Wait until every call :meth:`expect` noted has reached the saga or ended."""
        await asyncio.gather(*self._expected)

    @property
    def is_open(self) -> bool:
        return self.saga is not None and self.saga.status is SagaStatus.OPEN

    async def open(self) -> Saga:
        """Enter the boundary: start its saga (the gate may refuse to admit it)."""
        self.saga = await asyncio.create_task(self._boundary.__aenter__(), context=self._context)
        return self.saga

    async def commit(self) -> None:
        """Leave the boundary normally: complete the saga (a saga no longer open is left as it is)."""
        if self.is_open:
            await self._leave(None)

    async def roll_back(self, cause: Exception) -> RollbackReport:
        """Leave the boundary with ``cause``: undo every finished step newest-first."""
        try:
            await self._leave(cause)
        except SagaAborted as aborted:  # what a boundary says once it has rolled back
            return aborted.report
        raise RuntimeError(f"leaving the boundary with {cause!r} did not roll its saga back")

    async def _leave(self, cause: Exception | None) -> None:
        kind = type(cause) if cause is not None else None
        await asyncio.create_task(self._boundary.__aexit__(kind, cause, None), context=self._context)
