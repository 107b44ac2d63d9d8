"""Chaos: concurrent sagas keep running while the server under the log is restarted (Postgres)
or killed with SIGKILL and started again (Redis, append-only file, fsync always,
aof-load-truncated no: a torn last transaction is cut with redis-check-aof --fix).

Afterwards: no committed record is lost, none is written twice, no compensation ran twice,
and every saga is accounted for. The figures (sagas, steps, restarts, errors callers saw,
commits retried) are printed and attached to the test's JUnit report.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import ThrowawayPostgres, ThrowawayRedis

from agent_saga import ActionSemantics, SagaAborted, call_with, compensator, saga_scope
from agent_saga.audit import certify, verify_records
from agent_saga.log.resolve import open_log

pytestmark = pytest.mark.slow
C = ActionSemantics.COMPENSABLE
THREADS, BOUNCES, PAUSE = 8, 3, 1.5

_calls: collections.Counter[tuple[str, str]] = collections.Counter()
_calls_lock = threading.Lock()


def _effect(op: str, idempotency_key: str) -> dict[str, str]:
    with _calls_lock:
        _calls[(op, idempotency_key)] += 1
    return {"id": idempotency_key}


@compensator("chaos.refund")
def refund(ref: str, idempotency_key: str) -> None:
    _effect("refund", idempotency_key)


class Server:
    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.impl: Any = ThrowawayRedis(tmp_path) if kind == "redis" else ThrowawayPostgres()
        self.impl.start()
        self.url = self.impl.url
        self.bounces = 0

    def bounce(self) -> None:
        if self.kind == "redis":
            self.impl.kill()
            time.sleep(0.3)
            # A kill mid-write can tear the AOF's last (unacknowledged) transaction; the server
            # refuses to load it (aof-load-truncated no) and is repaired as an operator would.
            self.impl.start(repair=True)
        else:
            self.impl.restart()
        self.bounces += 1


@pytest.fixture(params=["postgres", "redis"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    s = Server(str(request.param), tmp_path)
    yield s
    s.impl.stop()


def test_sagas_survive_server_restarts_with_nothing_lost_doubled_or_unaccounted(
    server: Server, record_property: Any
) -> None:
    _calls.clear()
    wal = open_log(server.url, barrier_timeout=60.0)
    stop = threading.Event()
    outcomes: dict[str, str] = {}  # saga id -> completed | rolled-back | error:<what>
    lock = threading.Lock()
    counter = itertools.count()

    def run_sagas() -> None:
        while not stop.is_set():
            n = next(counter)
            saga_id = None
            try:
                with saga_scope(wal, name=f"chaos-{n}") as s:
                    saga_id = s.saga_id
                    for step in range(2):
                        s.execute(tool="chaos.charge", semantics=C,
                                  forward=lambda key=f"{n}-{step}": _effect("charge", key),
                                  compensate=call_with(refund, ref=f"{n}-{step}"))
                    if n % 5 == 0:
                        raise RuntimeError("the agent changed its mind")
                outcome = "completed"
            except SagaAborted as err:
                outcome = "rolled-back" if err.report.clean and "changed its mind" in str(err) else f"error:{err}"
            except Exception as err:
                outcome = f"error:{type(err).__name__}: {err}"
            if saga_id is not None:
                with lock:
                    outcomes[saga_id] = outcome

    workers = [threading.Thread(target=run_sagas) for _ in range(THREADS)]
    for w in workers:
        w.start()
    for _ in range(BOUNCES):
        time.sleep(PAUSE)
        server.bounce()
    time.sleep(PAUSE)
    stop.set()
    for w in workers:
        w.join(120)
    wal.close()

    with open_log(server.url) as reader:
        records = list(reader.records())
    errors = [o for o in outcomes.values() if o.startswith("error")]
    figures = {
        "backend": server.kind, "sagas": len(outcomes), "steps": sum(r["type"] == "STEP_COMMITTED" for r in records),
        "restarts": server.bounces, "errors_seen_by_callers": len(errors), "commits_retried": wal.retries,
        "records": len(records), "aof_repairs": getattr(server.impl, "repairs", 0),
    }
    print(figures)
    record_property("chaos", figures)

    # Nothing lost, nothing twice: one chain, contiguous sequence, each record of a saga once.
    chain = verify_records(records)
    assert chain.status == "intact", chain  # the report names the first record that breaks it
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    keys = [(r["saga"], r["type"], r.get("step"), r["body"].get("attempt")) for r in records]
    assert len(keys) == len(set(keys))
    ends = {r["saga"]: r["type"] for r in records if r["type"] in ("SAGA_COMPLETED", "SAGA_ROLLED_BACK")}
    for saga_id, outcome in outcomes.items():
        if outcome == "completed":
            assert ends.get(saga_id) == "SAGA_COMPLETED", saga_id  # its caller was told it committed
        elif outcome == "rolled-back":
            assert ends.get(saga_id) == "SAGA_ROLLED_BACK", saga_id
    # No compensation ran twice.
    refunds = [count for (op, _), count in _calls.items() if op == "refund"]
    assert refunds and max(refunds) == 1
    # Every saga accounted for: every committed effect compensated, or kept by a completed saga.
    assert not errors, errors[:3]
    cert = certify(records)
    assert cert.certified, cert.format_text()
    assert server.bounces == BOUNCES and figures["sagas"] > THREADS
