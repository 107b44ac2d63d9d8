"""Real uvicorn processes for the HTTP tests, each on a socket the test holds.

The test keeps the listening socket open, so a killed process can be replaced by a new
one on the same port (what a supervisor does): connections made meanwhile wait in the
socket's backlog for the new process instead of being refused.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from readyz import wait_ready

HERE = Path(__file__).parent


class Server:
    def __init__(self, app: str, tmp_path: Path, name: str, **env: str) -> None:
        self.app = app
        self.name = name
        self.dir = tmp_path / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.env = {**os.environ, "PYTHONPATH": str(HERE), **env}
        self.runs = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=60)

    def start(self, **env: str) -> Server:
        self.runs += 1
        out = open(self.dir / f"uvicorn-{self.runs}.log", "wb")  # noqa: SIM115 - the child writes it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agent_saga.service", f"{self.app}:app", "--fd", str(self.listener.fileno())],
            cwd=self.dir, env={**self.env, **env}, stdout=out, stderr=subprocess.STDOUT,
            pass_fds=[self.listener.fileno()],
        )
        out.close()
        return self

    def wait_ready(self, within: float = 60.0) -> None:
        assert self.process is not None
        wait_ready(self.process, self.http, self.log, self.name, within)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("uvicorn-*.log")))

    def wait_dead(self, within: float = 60.0) -> int:
        assert self.process is not None
        return self.process.wait(within)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def close(self) -> None:
        self.http.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.listener.close()


def wait_for(check: Any, what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)
