"""``saga_lifespan``: agent-saga's part of a FastAPI app's life (``pip install 'agent-saga[fastapi]>=3.0.0'``).

::

    app = FastAPI(lifespan=saga_lifespan("/data/agent-saga.wal", handlers=["myapp.undo"]))

At startup it opens the log and makes it the process's default (``saga_scope()`` and
``@saga`` in a route write there), imports the modules that declare the app's
``@compensator`` handlers, starts the recovery daemon on a background thread (it rolls
back the sagas of a worker that died, whose leases expired) and serves a readiness
probe. At shutdown it stops taking new sagas, waits up to ``drain_timeout`` seconds
for the running ones, stops the daemon, flushes the log and puts the defaults back.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypedDict, Unpack

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
except ImportError as missing:  # pragma: no cover - exercised in an env without the extra
    raise ImportError("saga_lifespan needs FastAPI: pip install 'agent-saga[fastapi]>=3.0.0'") from missing

from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.log.default import set_default_wal
from agent_saga.log.file import FileWAL
from agent_saga.log.resolve import open_log
from agent_saga.recovery.daemon import RecoveryDaemon
from agent_saga.recovery.paths import file_log_path
from agent_saga.service import _readiness as readiness
from agent_saga.service._drain import Drain
from agent_saga.service._sweeper import Sweeper

__all__ = ["SagaService", "saga_lifespan"]

log = logging.getLogger("agent_saga.service")

#: Where the running service is kept on ``app.state`` (and in the lifespan state).
STATE_KEY = "agent_saga"


def _open_log(target: WAL | str | os.PathLike[str]) -> tuple[WAL, bool, Any]:
    """The log, whether this service opened it (and so closes it), and what the daemon reads."""
    location: Any
    if isinstance(target, WAL):
        wal, owned = target, False
        location = file_log_path(target) or target
    elif "://" in os.fspath(target):
        try:
            wal, owned = open_log(os.fspath(target)), True
        except ValueError as err:  # an unknown scheme, or the backend's extra not installed
            raise ConfigurationError(str(err)) from None
        # The daemon reads and writes through this log (a new Redis log has no key to open by URL yet).
        location = wal
    else:
        wal, owned = FileWAL(os.fspath(target)), True
        location = file_log_path(wal)
    if not wal.durable:
        if owned:
            wal.close()
        raise ConfigurationError(
            f"{wal!r} is not durable: a crash would lose every open saga's undo and the recovery daemon "
            "could never finish them; give a file path (or a durable log)"
        )
    return wal, owned, location


def _import_handlers(modules: Iterable[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any failure to import is reported in one line
            raise ConfigurationError(
                f"saga_lifespan(handlers=[{name!r}]): could not import it ({type(err).__name__}: {err}); "
                "name an importable module that declares @compensator handlers or @durable entry points"
            ) from None


class ServiceOptions(TypedDict, total=False):
    """What ``saga_lifespan`` and ``SagaService`` take besides the log (see ``saga_lifespan``)."""

    handlers: Iterable[str]
    recovery: bool
    interval: float
    lease_grace: float
    drain_timeout: float


_DEFAULTS: ServiceOptions = {"handlers": (), "recovery": True, "interval": 5.0, "lease_grace": 5.0, "drain_timeout": 30.0}


def _checked(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` over the defaults, each checked: an unknown name or a wrong value is refused in one line."""
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:
        raise ConfigurationError(f"saga_lifespan got unknown option(s) {unknown}; the options are: "
                                 f"{', '.join(_DEFAULTS)}, readiness_path")
    given: dict[str, Any] = {**_DEFAULTS, **options}
    if isinstance(given["handlers"], str):
        raise ConfigurationError(
            f"saga_lifespan(handlers=...) takes a list of module names, not the string {given['handlers']!r}"
        )
    given["handlers"] = tuple(given["handlers"])
    _seconds("interval", given["interval"], positive=True)
    _seconds("lease_grace", given["lease_grace"])
    _seconds("drain_timeout", given["drain_timeout"])
    return given


class SagaService:
    """What ``saga_lifespan`` runs for one app; ``readiness()`` reads its signals."""

    def __init__(self, wal: WAL | str | os.PathLike[str], **options: Unpack[ServiceOptions]) -> None:
        given = _checked(options)
        self._target = wal
        self._handlers: tuple[str, ...] = given["handlers"]
        self._recovery: bool = given["recovery"]
        self._interval: float = given["interval"]
        self._lease_grace: float = given["lease_grace"]
        self.drain_timeout: float = given["drain_timeout"]
        self.wal: WAL | None = None
        self._owned = False
        self._default_set = False
        self._drain = Drain()
        self._sweeper: Sweeper | None = None

    @property
    def draining(self) -> bool:
        return self._drain.draining

    def open_sagas(self) -> list[str]:
        """The sagas started in this process and not ended yet."""
        return self._drain.open.ids()

    def start(self) -> None:
        try:
            wal, self._owned, location = _open_log(self._target)
            self.wal = wal
            set_default_wal(wal)
            self._default_set = True
            _import_handlers(self._handlers)
            if self._recovery:
                daemon = RecoveryDaemon(location, lease_grace=self._lease_grace)
                self._sweeper = Sweeper(daemon, self._interval)
            self._drain.install()
            if self._sweeper is not None:
                self._sweeper.start()
        except BaseException:
            self._release()
            raise
        log.info("agent-saga service started on %s (recovery %s)", self.wal.location,
                 "in the background" if self._sweeper else "off")

    async def stop(self) -> None:
        """Drain: refuse new sagas, wait for running ones (bounded), stop the daemon, flush the log."""
        self._drain.draining = True
        deadline = time.monotonic() + self.drain_timeout
        while self.open_sagas() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = self.open_sagas()
        if left:
            log.warning("drain: %d saga(s) still running after %gs, left to the recovery daemon once this "
                        "process's leases expire: %s", len(left), self.drain_timeout, ", ".join(left))
        if self._sweeper is not None:
            await asyncio.to_thread(self._sweeper.stop, max(deadline - time.monotonic(), 1.0))
            self._sweeper = None
        await asyncio.to_thread(self._release)
        log.info("agent-saga service stopped (%d saga(s) left running)", len(left))
        global last_drain_left
        last_drain_left = len(left)

    def _release(self) -> None:
        self._drain.uninstall()
        wal, self.wal = self.wal, None
        if self._default_set:
            set_default_wal(None)  # back to $AGENT_SAGA_WAL or ./agent-saga.wal
            self._default_set = False
        if wal is None:
            return
        try:
            if self._owned:
                wal.close()  # flushes what is queued, bounded
            else:
                wal.barrier()
        except Exception:  # a shutdown that raises would hide what went wrong
            log.exception("flushing %r at shutdown failed", wal)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        signals: dict[str, Callable[[], readiness.Signal]] = {
            "draining": lambda: {"ok": not self.draining, "detail": "shutting down" if self.draining else "serving"},
        }
        wal = self.wal
        signals["log"] = (lambda: readiness.log_signal(wal)) if wal is not None else (
            lambda: {"ok": False, "detail": "not started"})
        signals["kill_switch"] = readiness.kill_switch_signal
        sweeper = self._sweeper
        if sweeper is not None:
            signals["recovery"] = sweeper.signal
        return readiness.check(signals)


def _ready(request: Request) -> JSONResponse:
    service = getattr(request.app.state, STATE_KEY, None)
    if not isinstance(service, SagaService):
        return JSONResponse({"ready": False, "signals": {}, "detail": "saga_lifespan is not running"}, 503)
    ready, signals = service.readiness()
    return JSONResponse({"ready": ready, "signals": signals}, 200 if ready else 503)


def _add_probe(app: FastAPI, path: str) -> None:
    for route in app.router.routes:
        if getattr(route, "path", None) == path:
            if getattr(route, "endpoint", None) is _ready:
                return  # added by an earlier run of this lifespan (a test client's, say)
            raise ConfigurationError(
                f"the app already has a route at {path}; pass saga_lifespan(readiness_path=...) another "
                "path, or None to serve no probe"
            )
    app.router.add_api_route(path, _ready, methods=["GET"], include_in_schema=False)


def _seconds(label: str, value: object, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
        raise ConfigurationError(
            f"saga_lifespan({label}=...) must be a number of seconds {'> 0' if positive else '>= 0'}, got {value!r}"
        )


#: How many sagas the last drain in this process left running (None: no drain yet); the
#: process's exit status after SIGTERM reports it (``python -m agent_saga.service``).
last_drain_left: int | None = None


def saga_lifespan(
    wal: WAL | str | os.PathLike[str], *, readiness_path: str | None = "/readyz", **options: Unpack[ServiceOptions]
) -> Callable[[FastAPI], AbstractAsyncContextManager[dict[str, Any]]]:
    """The lifespan for ``FastAPI(lifespan=...)``: the log, recovery, readiness and a drain.

    ``wal``: the log's file path (or a durable log object). ``handlers``: modules to
    import at startup so the daemon can run their ``@compensator`` handlers and resume
    their ``@durable`` entry points (it runs in this process, so whatever the app imports
    is there too). ``recovery=False``
    runs no daemon here (run ``saga-recoveryd`` beside the app instead). ``interval``:
    seconds between sweeps; ``lease_grace``: extra seconds beyond a dead owner's lease.
    ``drain_timeout``: how long shutdown waits for running sagas. ``readiness_path``:
    where the probe is served (200 ready, 503 not, JSON either way), None for none.
    Defaults: no handlers, recovery on, interval 5 s, lease_grace 5 s, drain_timeout 30 s.
    """
    given = _checked(options)  # refused here, when the app is built, not at its startup
    if readiness_path is not None and not (isinstance(readiness_path, str) and readiness_path.startswith("/")):
        raise ConfigurationError(f"saga_lifespan(readiness_path=...) must start with '/', or be None; got {readiness_path!r}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if readiness_path is not None:
            _add_probe(app, readiness_path)
        service = SagaService(wal, **given)
        service.start()
        setattr(app.state, STATE_KEY, service)
        try:
            yield {STATE_KEY: service}
        finally:
            await service.stop()
            setattr(app.state, STATE_KEY, None)

    return lifespan
