"""Tentative resources: PENDING for the saga's life, COMMITTED or ROLLED_BACK at its end, and after
a crash (a real killed process) settled ROLLED_BACK by the recovery daemon from what the log says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tentative_world as world

from agent_saga import ConfigurationError, SagaAborted, saga_scope
from agent_saga.isolation import TentativeResource
from agent_saga.log.resolve import open_log
from agent_saga.recovery import RecoveryDaemon


@pytest.fixture
def orders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TentativeResource:
    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    resource = TentativeResource(world.settle, kind="order")
    yield resource
    resource.close()


def test_pending_for_the_saga_then_committed_or_rolled_back(orders: TentativeResource, url: str) -> None:
    with open_log(url) as wal:
        with saga_scope(wal) as s:
            orders.register("o-1")
            assert world.states() == [("o-1", "PENDING", "worker")]  # while the saga runs
        with pytest.raises(SagaAborted), saga_scope(wal) as s:
            orders.register("o-2")
            raise RuntimeError("payment declined")
    assert [st[:2] for st in world.states()] == [
        ("o-1", "PENDING"), ("o-1", "COMMITTED"), ("o-2", "PENDING"), ("o-2", "ROLLED_BACK"),
    ]
    assert s.saga_id


def test_a_settle_handler_the_daemon_cannot_find_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="compensator"):
        TentativeResource(lambda resource_id, state: None)


def test_a_crashed_sagas_pending_resource_is_settled_by_the_daemon(url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    env = {**os.environ, "AGENT_SAGA_LEASE_TTL": "1"}
    died = subprocess.run([sys.executable, str(Path(world.__file__)), url, "o-9"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == 137, died.stderr
    assert world.states() == [("o-9", "PENDING", "worker")]
    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    with RecoveryDaemon(url, lease_grace=0) as daemon:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not daemon.sweep().recovered:
            time.sleep(0.3)
    assert world.states()[-1] == ("o-9", "ROLLED_BACK", "daemon")
