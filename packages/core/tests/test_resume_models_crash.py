"""Issue 41 part 4: a durable run killed (SIGKILL) after its first model call resumes without asking it again.

The worker (resume_models.py) asks a local Chat Completions server through the real openai client,
books what the answer says, and asks again (Responses API). It is killed once the first call's
commit is on disk; ``agent-saga recover --import resume_models`` resumes it in a process of its own.
The server, in this process, counts every request both processes made.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery_checks import HERE, chain_ok, read_log, wait_until_expired
from resume_checks import env_for
from resume_trip import effects

from agent_saga.testing import ChatServer, Reply

pytestmark = pytest.mark.slow  # a worker process is killed

KEY = "sk-test-R8vN3cXq6wP1zL5k"
FIRST_MODEL_CALL = 2  # SAGA_STARTED, then the planner's STEP_COMMITTED


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer({"planner": [Reply(text="oslo")], "writer": [Reply(text="booked")]}, api_key=KEY) as running:
        yield running


def _env(world: Path, server: ChatServer, **extra: str) -> dict[str, str]:
    return env_for(world, MODELS_BASE_URL=server.base_url, MODELS_KEY=KEY, **extra)


@pytest.mark.parametrize("entry", ["models.trip", "models.trip_async"])
def test_a_run_killed_after_its_first_model_call_resumes_without_asking_the_model_again(
    tmp_path: Path, server: ChatServer, entry: str,
) -> None:
    wal = tmp_path / "models.wal"
    worker = subprocess.run([sys.executable, str(HERE / "resume_models.py"), str(wal), entry, "m-1", "paris"],
                            env=_env(tmp_path, server, MODELS_KILL_AFTER=str(FIRST_MODEL_CALL)),
                            capture_output=True, text=True, timeout=120, check=False)
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert (len(server.requests_for("planner")), len(server.requests_for("writer"))) == (1, 0)
    assert [r["type"] for r in read_log(wal)] == ["SAGA_STARTED", "STEP_COMMITTED"]
    wait_until_expired()

    done = subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", "resume_models",
         "--lease-grace", "0"],
        env=_env(tmp_path, server), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0 and "resumed 1" in done.stdout, done.stdout + done.stderr

    # The planner was asked once across both processes; its served answer chose the booking.
    assert len(server.requests_for("planner")) == 1 and len(server.requests_for("writer")) == 1
    assert [(e["ev"], e["city"]) for e in effects(tmp_path)] == [("book", "oslo")]
    records = read_log(wal)
    assert records[-1]["type"] == "SAGA_COMPLETED" and records[-1]["body"]["result"] == ["oslo", "R-oslo", "booked"]
    # The served call wrote only its mark; the resumed run wrote the booking and the second call.
    assert [(r["type"], r["body"].get("tool")) for r in records[2:-1]] == [
        ("SAGA_RESUMED", None), ("STEP_SERVED", None), ("STEP_INTENT", "abook" if entry.endswith("async") else "book"), ("STEP_COMMITTED", None),
        ("STEP_COMMITTED", "openai.responses.create")]
    assert KEY.encode() not in wal.read_bytes() and chain_ok(wal)
