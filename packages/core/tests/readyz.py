"""Waiting for a uvicorn process of the HTTP and service tests to answer ``/readyz``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import httpx

__all__ = ["wait_ready"]


def wait_ready(
    process: subprocess.Popen[bytes], http: httpx.Client, log: Callable[[], str], name: str, within: float = 60.0
) -> httpx.Response:
    """``/readyz``'s first 200; fail with ``log()`` once the process exits or ``within`` seconds pass (a bound on a hang)."""
    deadline = time.monotonic() + within
    while True:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited with {process.returncode}:\n{log()}")
        try:
            response = http.get("/readyz")
            if response.status_code == 200:
                return response
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never became ready:\n{log()}")
        time.sleep(0.1)
