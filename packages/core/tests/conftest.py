from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_saga import FileWAL, MemoryWAL
from agent_saga.log import group
from agent_saga.log.codec import encode_entry


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default log is ./agent-saga.wal: keep every test's default log apart.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_SAGA_WAL", raising=False)
    # The approval store and the approver's key default to $AGENT_SAGA_HOME: never the developer's own.
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / ".agent-saga"))
    monkeypatch.delenv("AGENT_SAGA_SWITCH", raising=False)
    monkeypatch.delenv("AGENT_SAGA_APPROVER_KEY", raising=False)
    # The host-wide kill switch (/var/lib/agent-saga) and trusted approver keys (/etc/agent-saga)
    # move under a temporary root, so no test halts, or trusts for, the real host. Every saga
    # records this relocation (see switch_posture).
    monkeypatch.setenv("AGENT_SAGA_HOST_ROOT", str(tmp_path / "host"))


FAST_LANE = os.environ.get("AGENT_SAGA_FAST_LANE") == "1"
# The Hypothesis profiles ("ci", "fast"), loaded before any test module builds its settings.
# The ui and service envs run no property test and do not install Hypothesis.
try:
    import hypothesis_profiles  # noqa: F401
except ModuleNotFoundError as err:
    if err.name != "hypothesis":
        raise


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # `tox -e core-fast` runs what needs no other process and no server. A test that starts
    # a process anyway fails here, naming the mark it needs, instead of quietly slowing the lane.
    if not FAST_LANE:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the fast lane starts no process: mark this test @pytest.mark.slow")

    import subprocess

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)


@pytest.fixture(autouse=True)
def _fresh_plugins() -> Iterator[None]:
    # Every test starts with no plugin registered and no observer in the engine's chain.
    yield
    from agent_saga.engine.observe import interceptors
    from agent_saga.plugins.manager import reset_plugins

    reset_plugins()
    assert interceptors() == (), f"a test left interceptors installed: {interceptors()}"


@pytest.fixture
def encoded_whole(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The types of the records a group-commit log's ``append`` encodes whole during the test.

    A record joined from its parts (``append_encoded``) is not among them: what the engine's
    joined records (engine/commit_record.py, engine/durable_record.py) exist to save.
    """
    encoded: list[str] = []

    def spy(rtype: Any, saga: Any, step: Any, body: Mapping[str, Any]) -> str:
        encoded.append(str(rtype))
        return encode_entry(rtype, saga, step, body)

    monkeypatch.setattr(group, "encode_entry", spy)
    return encoded


@pytest.fixture
def mem() -> MemoryWAL:
    return MemoryWAL()


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[FileWAL]:
    log = FileWAL(tmp_path / "test.wal")
    yield log
    log.close()


@pytest.fixture
def operator_key(tmp_path: Path) -> Path:
    """An operator key file trusted on this test's host: what signs compactions and redactions."""
    from operator_support import trusted_operator_key

    return trusted_operator_key(tmp_path)


@pytest.fixture
def hook() -> Iterator[object]:
    """A webhook server on 127.0.0.1 recording what it is sent (approval_support.Hook), closed after."""
    from approval_support import Hook

    server = Hook()
    yield server
    server.close()


@pytest.fixture
def fresh_gate_globals() -> Iterator[None]:
    """No breaker, limit store or kill switch set by another test (the gate tests' pytestmark)."""
    from gate_support import reset_gate_globals

    reset_gate_globals()
    yield
    reset_gate_globals()


@pytest.fixture
def short_leases() -> Iterator[float]:
    """Sagas' leases last 0.3 s (the value it gives) while the test runs, so one expires soon."""
    from agent_saga.recovery.lease import configure_leases, lease_keeper

    keeper = lease_keeper()
    old = keeper.ttl
    configure_leases(0.3)
    yield 0.3
    configure_leases(old)


@pytest.fixture
def wal_path(tmp_path: Path) -> Path:
    return tmp_path / "test.wal"


def types(wal: object) -> list[str]:
    return [r["type"] for r in wal.records()]  # type: ignore[attr-defined]


os.environ.setdefault("AGENT_SAGA_TEST", "1")


@pytest.fixture(scope="session")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log of one real `agent-saga demo` run. Shared: copy it before changing it."""
    from viz_logs import run_demo

    return run_demo(tmp_path_factory.mktemp("demo"))
