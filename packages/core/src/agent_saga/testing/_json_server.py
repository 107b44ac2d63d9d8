"""What the suite's scripted model servers share: a local HTTP server that answers JSON POSTs.

A subclass says what each request gets (:meth:`JSONServer.answer`); this keeps the socket,
the thread it serves on and the JSON in and out. Standard library only; it listens on
127.0.0.1 at a free port, and a ``with`` block starts and stops it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["JSONServer"]


class JSONServer:
    """Serves POSTs with :meth:`answer` on a thread named ``thread_name``."""

    thread_name = "json-server"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=self.thread_name, daemon=True)

    @property
    def address(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def answer(self, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Mapping[str, Any]]:
        """The status and JSON payload for one POST (``headers`` lower-cased; ``body`` None: not JSON)."""
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # a test's output is not the place for an access log

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = None
                status, payload = server.answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
