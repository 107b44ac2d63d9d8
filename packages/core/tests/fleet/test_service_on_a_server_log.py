"""saga_lifespan's service on a server log: the app's sagas go to it, its daemon sweeps it."""

from __future__ import annotations

import asyncio

import pytest

from agent_saga import default_wal, saga_scope
from agent_saga.log.resolve import open_log
from agent_saga.service.lifespan import SagaService


async def test_the_service_writes_to_and_recovers_from_a_server_log(url: str) -> None:
    service = SagaService(url, interval=0.05)
    service.start()
    try:
        assert default_wal() is service.wal and service.wal is not None
        async with saga_scope(name="checkout") as s:
            await s.execute(tool="crm.note", semantics="REVERSIBLE", forward=lambda: "noted")
        for _ in range(200):  # the daemon's first sweep of the server log
            ready, signals = service.readiness()
            if signals.get("recovery", {}).get("sweeps"):
                break
            await asyncio.sleep(0.05)
        assert ready, signals
        assert signals["log"]["location"] == service.wal.location
        assert "0 open saga(s)" in signals["recovery"]["detail"]
    finally:
        await service.stop()
    with open_log(url, create=False) as wal:
        written = [r["type"] for r in wal.records()]
    assert written[0] == "SAGA_STARTED" and written[-1] == "SAGA_COMPLETED", written


def test_a_server_log_url_without_a_server_is_refused_at_startup() -> None:
    from agent_saga.errors import WALError

    service = SagaService("postgresql://postgres@127.0.0.1:1/postgres?log=none", recovery=False)
    with pytest.raises(WALError, match="cannot open the log"):
        service.start()
    assert service.wal is None
