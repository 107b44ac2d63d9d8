"""saga_lifespan's service on a server log: the app's sagas go to it, its daemon sweeps it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent_saga import default_wal, saga_scope
from agent_saga.log.resolve import open_log
from agent_saga.service import SagaService


async def test_the_service_writes_to_and_recovers_from_a_server_log(url: str) -> None:
    """The daemon sees the app's saga on the server log while it runs (and leaves it: it is live),
    then sees it ended. Each look is a sweep that began after the saga's records were there.

    Seen before: the test took the daemon's first sweep, whatever it had read, and on a loaded
    machine that sweep ran before the saga ended ("1 open saga(s): 1 live").
    """
    service = SagaService(url, interval=0.05)
    service.start()
    try:
        assert default_wal() is service.wal and service.wal is not None
        async with saga_scope(name="checkout") as s:
            await s.execute(tool="crm.note", semantics="REVERSIBLE", forward=lambda: "noted")
            await service.wal.barrier_async()  # the saga's records are on the server
            during = await _a_sweep_from_now(service)
            assert during["detail"].startswith("1 open saga(s): 1 live,"), during
        after = await _a_sweep_from_now(service)
        ready, signals = service.readiness()
        assert ready, signals
        assert signals["log"]["location"] == service.wal.location
        assert after["detail"].startswith("0 open saga(s)"), after
    finally:
        await service.stop()
    with open_log(url, create=False) as wal:
        written = [r["type"] for r in wal.records()]
    assert written[0] == "SAGA_STARTED" and written[-1] == "SAGA_COMPLETED", written


async def _a_sweep_from_now(service: SagaService, within: float = 120.0) -> dict[str, Any]:
    """The recovery signal once a sweep that began after this call has finished.

    The sweep running now may have read the log before the call; the one after it cannot
    have, so the count of finished sweeps must move on by two.
    """
    since = service.readiness()[1]["recovery"]["sweeps"]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        signal: dict[str, Any] = service.readiness()[1]["recovery"]
        if signal["sweeps"] >= since + 2:
            return signal
        await asyncio.sleep(0.02)
    raise AssertionError(f"no sweep began and finished within {within:g}s: {service.readiness()}")


def test_a_server_log_url_without_a_server_is_refused_at_startup() -> None:
    from agent_saga.errors import WALError

    service = SagaService("postgresql://postgres@127.0.0.1:1/postgres?log=none", recovery=False)
    with pytest.raises(WALError, match="cannot open the log"):
        service.start()
    assert service.wal is None
