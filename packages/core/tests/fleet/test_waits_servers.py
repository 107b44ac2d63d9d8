"""Durable waits (issue 41 part 5) on PostgresWAL and RedisWAL: signalled by URL, resumed by URL.

A run is stopped in its wait with no end record (its clock's park raises ``SagaQuarantined``
where a crash would be); the signal and the resume each open the log by URL, a connection of
their own. On a server log a wait reads the whole log at each look (engine/inbox.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))

from agent_saga import SagaQuarantined, SignalRefused, durable, resume, signal, wait_for_event
from agent_saga.engine.waits import Wakeup
from agent_saga.log.base import WAL

HOOK: dict[str, Any] = {}


class Clock:
    """A WaitClock at a fixed time whose park stops the run, or moves time on."""

    def __init__(self, t: float, stop: bool) -> None:
        self.t, self.stop, self.parks = t, stop, 0

    def now(self) -> float:
        return self.t

    def park(self, seconds: float, wakeup: Wakeup) -> None:
        self.parks += 1
        if self.stop:
            raise SagaQuarantined("stopped while it waited, with no end record (a crash's stand-in)")
        self.t += seconds

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None:
        self.park(seconds, wakeup)


@durable("servers.await")
def server_await() -> Any:
    return wait_for_event("go", timeout=3600, clock=HOOK["clock"], poll=60)


def _body(wal: WAL, saga_id: str, rtype: str) -> list[dict[str, Any]]:
    return [r["body"] for r in wal.records() if r["saga"] == saga_id and r["type"] == rtype]


def test_a_signal_sent_by_url_to_a_stopped_wait_is_what_its_resume_returns(server_wal: WAL, url: str) -> None:
    HOOK["clock"] = Clock(1000.0, stop=True)
    with pytest.raises(SagaQuarantined):
        server_await(saga_id="srv-w1", wal=server_wal)
    server_wal.barrier()
    assert [b["until"] for b in _body(server_wal, "srv-w1", "WAIT_STARTED")] == [4600.0]

    signal("srv-w1", "go", {"ok": [1, "two"]}, wal=url)
    HOOK["clock"] = Clock(1060.0, stop=False)
    assert resume("srv-w1", wal=url, clock=lambda: time.time() + 3600) == {"ok": [1, "two"]}
    assert HOOK["clock"].parks == 0
    assert [b["outcome"] for b in _body(server_wal, "srv-w1", "WAIT_ENDED")] == ["signalled"]
    with pytest.raises(SignalRefused, match="already ended"):
        signal("srv-w1", "go", 1, wal=url)
