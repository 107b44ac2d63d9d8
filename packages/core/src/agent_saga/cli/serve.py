"""Serving a page until the operator stops it: the verbs that run a local server (``ui``, ``approvals serve``)."""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["serve_until_stopped"]


def serve_until_stopped(server: Any) -> None:
    """``server.serve_forever()`` until Ctrl+C or SIGTERM (both end it cleanly)."""
    with _StoppedBySigterm():
        try:
            server.serve_forever()
        except (KeyboardInterrupt, _Terminated):
            pass


class _Terminated(BaseException):
    """SIGTERM arrived: leave serve_forever as Ctrl+C does.

    A BaseException, like KeyboardInterrupt: arriving while a request is being accepted, an
    Exception would be swallowed by socketserver's handle_error and the server would go on.
    """


class _StoppedBySigterm:
    """SIGTERM stops the server as cleanly as SIGINT (exit 0, socket closed).

    A supervisor (systemd, docker stop, a test harness) sends SIGTERM, and a process started from a
    background shell inherits SIGINT ignored, so Ctrl+C alone would leave it running. The handler
    raises in the main thread, out of serve_forever's select; shutdown() cannot be used there, it
    waits for the loop it would be called from.
    """

    def __enter__(self) -> None:
        self._previous: Any = None
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            self._previous = signal.signal(signal.SIGTERM, _raise_terminated)

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated
