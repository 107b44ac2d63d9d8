"""Run ``service_app`` under a real uvicorn process, on a socket the test bound (no port races)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from readyz import wait_ready

HERE = Path(__file__).parent


class Server:
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.wal = tmp_path / "service.wal"
        self.world = tmp_path / "world"
        self.output = tmp_path / "uvicorn.log"
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self.env = {
            **os.environ, "PYTHONPATH": str(HERE), "SERVICE_APP_WAL": str(self.wal),
            "SERVICE_WORLD": str(self.world), **env,
        }
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agent_saga.service", "service_app:app", "--fd", str(listener.fileno())],
                cwd=tmp_path, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=[listener.fileno()],
            )
        listener.close()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def wait_ready(self, within: float = 60.0) -> httpx.Response:
        return wait_ready(self.process, self.http, self.log, "the app", within)

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def terminate(self, within: float = 60.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(within)

    def close(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
