"""saga_lifespan in process (Starlette's TestClient drives the lifespan): drain, readiness, bad input."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agent_saga import (
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    StepRefused,
    default_wal,
    saga,
    saga_lifespan,
    saga_scope,
)
from agent_saga.context import default_gate
from agent_saga.errors import WALClosed
from agent_saga.gate import DefaultGate
from agent_saga.service import SagaService


def test_the_seed_snippet_runs_on_the_default_log(tmp_path: Path) -> None:
    wal_path = tmp_path / "wal.jsonl"
    app = FastAPI(lifespan=saga_lifespan(str(wal_path)))

    @app.post("/checkout")
    async def checkout() -> dict[str, str]:
        @saga
        async def process_payment() -> str:
            return "paid"

        return {"status": await process_payment()}

    with TestClient(app) as client:
        assert client.post("/checkout").json() == {"status": "paid"}
        assert default_wal().location == str(wal_path)
    types = wal_path.read_text().splitlines()
    assert len(types) == 2 and '"SAGA_STARTED"' in types[0] and '"SAGA_COMPLETED"' in types[1]
    assert default_wal().location != str(wal_path)  # the default is put back at shutdown
    assert isinstance(default_gate(), DefaultGate)


async def test_shutdown_refuses_new_sagas_and_waits_for_running_ones(tmp_path: Path) -> None:
    lifespan = saga_lifespan(tmp_path / "service.wal", drain_timeout=30)
    app = FastAPI()
    release = threading.Event()
    started = asyncio.Event()

    async def running() -> str:
        async with saga_scope() as s:
            started.set()
            return await s.execute(tool="slow", semantics="REVERSIBLE",  # type: ignore[no-any-return]
                                   forward=lambda: release.wait(30) and "done")

    running_app = lifespan(app)
    service = (await running_app.__aenter__())["agent_saga"]
    task = asyncio.create_task(running())
    await started.wait()
    assert len(service.open_sagas()) == 1
    stopping = asyncio.create_task(running_app.__aexit__(None, None, None))
    await asyncio.sleep(0.2)
    assert not stopping.done()  # waiting for the running saga
    with pytest.raises(StepRefused) as refused:
        async with saga_scope():
            pass
    assert refused.value.rule == "drain"
    ok, signals = service.readiness()
    assert not ok and signals["draining"]["ok"] is False
    release.set()
    assert await task == "done"
    await stopping
    assert service.open_sagas() == []
    assert isinstance(default_gate(), DefaultGate)


async def test_a_saga_still_running_after_the_drain_timeout_is_named_and_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    lifespan = saga_lifespan(tmp_path / "service.wal", drain_timeout=0.3)
    async with lifespan(FastAPI()) as state:
        scope = saga_scope()
        s = await scope.__aenter__()
        step = asyncio.create_task(s.execute(tool="stuck", semantics="REVERSIBLE", forward=lambda: release.wait(30)))
        await asyncio.sleep(0.1)
    assert f"still running after 0.3s, left to the recovery daemon once this process's leases expire: {s.saga_id}" \
        in caplog.text
    release.set()
    with pytest.raises(WALClosed):  # the log was flushed and closed under it: its outcome is the daemon's
        await step
    del state


def ready(client: TestClient, path: str = "/readyz") -> bool:
    """Whether the probe turns 200 (the first recovery sweep runs in the background)."""
    for _ in range(400):
        if client.get(path).status_code == 200:
            return True
        threading.Event().wait(0.05)
    return False


def test_readiness_fails_closed_when_the_daemon_cannot_verify_the_log(tmp_path: Path) -> None:
    wal_path = tmp_path / "service.wal"
    with FileWAL(wal_path) as wal, saga_scope(wal) as s:
        s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1)
    lines = wal_path.read_text().splitlines()
    wal_path.write_text("\n".join([lines[0].replace('"name":"saga"', '"name":"forged"'), *lines[1:]]) + "\n")
    app = FastAPI(lifespan=saga_lifespan(wal_path, interval=0.05))
    with TestClient(app) as client:
        for _ in range(200):
            body = client.get("/readyz").json()
            if body["signals"]["recovery"]["sweeps"] or "failed" in body["signals"]["recovery"]["detail"]:
                break
            threading.Event().wait(0.05)
        response = client.get("/readyz")
        assert response.status_code == 503
        recovery = response.json()["signals"]["recovery"]
        assert recovery["ok"] is False and "the last sweep failed: ChainUnverified" in recovery["detail"]


def test_a_route_already_at_the_probe_path_is_refused(tmp_path: Path) -> None:
    app = FastAPI(lifespan=saga_lifespan(tmp_path / "wal"))

    @app.get("/readyz")
    def mine() -> str:
        return "mine"

    with pytest.raises(ConfigurationError, match="already has a route at /readyz"), TestClient(app):
        pass
    app = FastAPI(lifespan=saga_lifespan(tmp_path / "wal", readiness_path="/healthz/saga", interval=0.05))
    with TestClient(app) as client:
        assert ready(client, "/healthz/saga")
    with TestClient(app) as client:  # a second run of the same app keeps its one probe
        assert ready(client, "/healthz/saga")
        assert sum(getattr(r, "path", "") == "/healthz/saga" for r in app.routes) == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"handlers": "myapp.undo"}, "a list of module names"),
    ({"interval": 0}, "interval=...) must be a number of seconds > 0"),
    ({"drain_timeout": -1}, "drain_timeout=...) must be a number of seconds >= 0"),
    ({"lease_grace": True}, "lease_grace"),
    ({"readiness_path": "readyz"}, "must start with '/'"),
    ({"drain_timout": 5}, "unknown option(s) ['drain_timout']; the options are: handlers, recovery"),
])
def test_bad_arguments_are_refused_when_the_app_is_built(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        saga_lifespan(tmp_path / "wal", **kwargs)  # type: ignore[arg-type]
    if "readiness_path" not in kwargs:  # the service a lifespan runs checks the same options, by the same rule
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            SagaService(tmp_path / "wal", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("target", "message"), [
    (MemoryWAL(), "is not durable"),
    ("ftp://localhost/agents", "unknown log URL scheme"),
    ("postgresql://localhost/agents", r"pip install 'agent-saga\[postgres\]>=3\.0\.0'"),  # the service env has no psycopg
])
def test_a_log_that_cannot_hold_the_undo_is_refused_at_startup(target: object, message: str) -> None:
    app = FastAPI(lifespan=saga_lifespan(target))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=message), TestClient(app):
        pass
    assert isinstance(default_gate(), DefaultGate)


def test_a_handler_module_that_does_not_import_is_named(tmp_path: Path) -> None:
    app = FastAPI(lifespan=saga_lifespan(tmp_path / "wal", handlers=["no_such_module_here"]))
    with pytest.raises(ConfigurationError, match=r"handlers=\['no_such_module_here'\]\): could not import it"), \
            TestClient(app):
        pass
    assert isinstance(default_gate(), DefaultGate)
