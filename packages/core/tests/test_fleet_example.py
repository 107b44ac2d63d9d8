"""examples/fleet_pipeline.py, run as a user runs it: SagaFleet across threads that drop the context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga.log import read_records
from agent_saga.testing import EXAMPLES

pytestmark = pytest.mark.slow  # a subprocess


def test_the_fleet_finds_its_transaction_on_bare_threads_and_pools_and_undoes_both(tmp_path: Path) -> None:
    for _ in range(2):  # twice in one folder: each run starts its own log afresh
        out = subprocess.run([sys.executable, "-W", "error", str(EXAMPLES / "fleet_pipeline.py")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=True).stdout
        # what the fleet fixes: the thread itself has no saga, the registered tool finds the fleet's
        assert "inside the transaction, a bare thread sees the saga by itself: False" in out
        assert "reserved 5000 -> res_1   (on bare-thread)" in out
        assert "published 'Q3' -> doc_1   (on pool_0)" in out
        assert out.index("unpublished doc_1") < out.index("released res_1")  # newest first
        assert ": clean\n" in out
        assert "cause: NotApplied: notification service unreachable" in out
        assert "sagas in the log: 1" in out
        assert "world: {'reservations': {}, 'published': {}}" in out
        assert "research.reserve  crewai     COMPENSABLE  recoverable after a crash: True" in out
    records = list(read_records(tmp_path / "fleet-pipeline.wal"))
    assert [r["body"]["tool"] for r in records if r["type"] == "STEP_INTENT"] == [
        "research.reserve", "writer.publish", "reviewer.notify"]
