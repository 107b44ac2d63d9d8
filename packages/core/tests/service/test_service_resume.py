"""saga_lifespan resumes a crashed durable run forward: its background daemon is the recovery daemon.

A worker runs the issue's trip (``resume_trip.py``) and dies once Paris and Rome are booked; a
FastAPI app whose lifespan imports the module that defines the entry point (``handlers=``) then
starts on the same log, and its background sweep finishes the trip: Oslo booked once, nothing
booked twice, the run ended with its return value.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recovery_checks import read_log
from resume_checks import AFTER_OSLO_THOUGHT, crash
from resume_trip import effects

from agent_saga import saga_lifespan

pytestmark = pytest.mark.slow  # a worker process is killed


def test_the_lifespan_resumes_a_crashed_durable_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, "trip.plan", AFTER_OSLO_THOUGHT)
    monkeypatch.setenv("RESUME_WORLD", str(tmp_path))
    app = FastAPI(lifespan=saga_lifespan(wal, handlers=["resume_trip"], interval=0.05, lease_grace=0))
    with TestClient(app):
        for _ in range(600):  # the first sweep runs on the lifespan's thread: wait for its end record
            if any(r["type"] == "SAGA_COMPLETED" for r in read_log(wal)):
                break
            threading.Event().wait(0.05)
    records = read_log(wal)
    assert [r["type"] for r in records].count("SAGA_RESUMED") == 1
    assert records[-1]["type"] == "SAGA_COMPLETED" and records[-1]["body"]["result"] == ["R-paris", "R-rome", "R-oslo"]
    booked = [e["city"] for e in effects(tmp_path) if e["ev"] == "book"]
    assert sorted(booked) == ["oslo", "paris", "rome"]
