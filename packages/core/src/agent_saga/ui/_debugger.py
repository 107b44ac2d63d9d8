"""The debugger's HTTP server: the standard library's, serving one page and a JSON API.

Safe by default. It binds 127.0.0.1, and refuses any other address unless a bearer
token is set (anyone who can reach the port could otherwise read every argument in
the log). With a token, every API call must carry ``Authorization: Bearer <token>``
(compared in constant time); the page itself holds no data and is served to anyone.
On a loopback address it also answers only requests whose ``Host`` is that address,
so a web page elsewhere cannot read it through DNS rebinding. Every response forbids
framing and inline script, and the page writes log text as text, never as markup.
Every string the API serves is inert (:func:`agent_saga.inert.inert_json`): control,
bidi and invisible characters arrive as visible escapes, so a bidi override in an
argument cannot reorder what the operator reads; a run is addressed by its id as served.
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from agent_saga.errors import SagaError
from agent_saga.inert import inert_json
from agent_saga.ui._follow import RecordSource
from agent_saga.ui._runs import RunStore

__all__ = ["CSP", "DEFAULT_HOST", "DEFAULT_PORT", "PageHandler", "UiServer", "is_loopback", "make_server"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
# The one policy of every page this package serves: script and style from the server itself only.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: RunStore, token: str | None) -> None:
        self.store = store
        self.token = token
        self._static: dict[str, bytes] = {}
        super().__init__(address, _Handler)
        host, port = str(self.server_address[0]), int(self.server_address[1])
        self.host = host
        self.url = f"http://{host}:{port}/"
        self.hosts = {f"{host}:{port}", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}

    def static(self, name: str) -> bytes:
        if name not in self._static:
            self._static[name] = resources.files("agent_saga.ui").joinpath("static", name).read_bytes()
        return self._static[name]

    def serve_in_thread(self) -> threading.Thread:
        """Serve on a daemon thread (for tests and embedding); stop with ``shutdown()``."""
        # shutdown() waits for the loop's next poll: 50 ms instead of serve_forever's default 0.5 s.
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="agent-saga-ui",
                                  daemon=True)
        thread.start()
        return thread


def make_server(
    source: RecordSource, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None
) -> UiServer:
    """A server for ``source`` on ``host:port`` (port 0: any free port). Not yet serving.

    Raises ValueError when ``host`` is not a loopback address and no ``token`` is given,
    and OSError when the address cannot be bound.
    """
    if token is not None and not token.strip():
        raise ValueError("the bearer token is empty: give a long random one, or none on 127.0.0.1")
    if not is_loopback(host) and token is None:
        raise ValueError(
            f"refusing to serve the log on {host}: anyone who can reach it could read every run. Bind "
            "127.0.0.1 (the default), or set a bearer token (--token, or $AGENT_SAGA_UI_TOKEN)"
        )
    store = RunStore(source)
    store.refresh()  # an unreadable log fails here, before anyone opens the page
    return UiServer((host, port), store, token)


class PageHandler(BaseHTTPRequestHandler):
    """What every page the ui serves answers with (the debugger, the approvals page): the same
    locked-down headers on every response, no body for HEAD, and no line per request."""

    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per poll would drown the terminal

    def _send(self, status: HTTPStatus, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)



class _Handler(PageHandler):
    server: UiServer
    server_version = "agent-saga-ui"

    def _json(self, status: HTTPStatus, value: Any, extra: dict[str, str] | None = None) -> None:
        body = inert_json(value).encode()
        self._send(status, body, "application/json; charset=utf-8", extra)

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if is_loopback(self.server.host) and self.headers.get("Host") not in self.server.hosts:
            self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "unexpected Host header"})
            return
        url = urlsplit(self.path)
        if url.path in _STATIC:
            name, ctype = _STATIC[url.path]
            self._send(HTTPStatus.OK, self.server.static(name), ctype)
            return
        if not url.path.startswith("/api/"):
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
            return
        if not self._authorized():
            self._json(HTTPStatus.UNAUTHORIZED, {"error": "a bearer token is required"},
                       {"WWW-Authenticate": 'Bearer realm="agent-saga"'})
            return
        try:
            self._api(url.path[len("/api/"):].split("/"), url.query)
        except (OSError, SagaError) as err:  # the log vanished, or a line is not a record
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"cannot read the log: {err}"})

    def _api(self, parts: list[str], query: str) -> None:
        store = self.server.store
        version = store.refresh()
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        if parts == ["runs"]:
            since = params.get("since")
            if since == str(version):
                self._json(HTTPStatus.OK, {"version": version, "unchanged": True})
            else:
                self._json(HTTPStatus.OK, store.runs())
            return
        if parts[0] == "runs" and len(parts) in (2, 3) and parts[1]:
            saga_id = unquote(parts[1])
            if len(parts) == 2:
                self._found(saga_id, store.run(saga_id))
                return
            if parts[2] == "replay":
                start = params.get("from", "0")
                if not (start.isascii() and start.isdigit()):
                    self._json(HTTPStatus.BAD_REQUEST, {"error": f"from={start!r} is not a frame number: "
                                                                 "give the 'next' of the previous page"})
                    return
                self._found(saga_id, store.replay(saga_id, int(start)))
                return
        self._json(HTTPStatus.NOT_FOUND, {"error": f"no such API path: /api/{'/'.join(parts)}"})

    def _found(self, saga_id: str, value: Any) -> None:
        if value is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no run {saga_id!r} in this log"})
        else:
            self._json(HTTPStatus.OK, value)
