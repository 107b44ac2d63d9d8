"""On PostgresWAL and RedisWAL, one record the log cannot encode is refused to its caller only.

Issue 25, item 7: the record used to reach the flusher, whose commit failed for the
whole batch and broke the log for every saga writing to it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_saga import SagaAborted, StepRefused, WALRefused, saga_scope
from agent_saga.audit import verify_records


def test_an_unencodable_record_is_refused_and_the_batch_around_it_commits(server_wal: Any) -> None:
    good = [server_wal.append("NOTE", "saga-a", {"n": 1})]
    with pytest.raises(WALRefused, match=r"body\.limit is NaN"):
        server_wal.append("NOTE", "saga-b", {"limit": float("nan")})
    with pytest.raises(WALRefused, match="lone surrogate"):
        server_wal.append("NOTE", "saga-b", {"memo": "\udc00"})
    good.append(server_wal.append("NOTE", "saga-c", {"n": 2}))
    server_wal.barrier(good[-1])
    assert server_wal.broken is None
    assert [(r["saga"], r["body"]) for r in server_wal.records()] == [("saga-a", {"n": 1}), ("saga-c", {"n": 2})]
    assert verify_records(server_wal.records()).ok


def test_a_nan_argument_is_refused_at_the_door_and_the_server_log_serves_the_next_saga(server_wal: Any) -> None:
    with pytest.raises(SagaAborted) as aborted:
        with saga_scope(server_wal) as s:
            s.execute(tool="search", forward=lambda: pytest.fail("ran"), semantics="IRREVERSIBLE",
                      args=json.loads('{"limit": NaN}'))
    assert isinstance(aborted.value.cause, StepRefused) and "args.limit is NaN" in str(aborted.value)
    with saga_scope(server_wal) as s:
        assert s.execute(tool="ok", forward=lambda: 1, semantics="IRREVERSIBLE") == 1
    server_wal.barrier()
    assert server_wal.broken is None and verify_records(server_wal.records()).ok
