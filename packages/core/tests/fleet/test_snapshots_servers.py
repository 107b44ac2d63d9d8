"""Durable snapshots on PostgresWAL and RedisWAL with their stores: kill -9, the daemon restores."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent.parent
sys.path.insert(0, str(TESTS))

from snapshot_crash import crash_and_recover  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", ["", "after-put", "after-change-1", "after-change-2", "inside-step"])
def test_the_daemon_restores_a_durable_snapshot_from_a_server_store(
    backend: str, url: str, request: pytest.FixtureRequest, tmp_path: Path, point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = request.getfixturevalue("pg" if backend == "postgres" else "rd")
    kind = backend
    # A store of its own per test (the store's name is fixed; its keys/rows are per saga id).
    problems = crash_and_recover(url, kind, server, tmp_path / "world", point, monkeypatch)
    assert not problems, "\n".join(problems)
