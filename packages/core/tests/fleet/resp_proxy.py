"""A TCP proxy in front of a real redis-server that loses one reply or holds one request back.

It reads whole RESP messages (each request from the client, each reply from the server), so it
acts on exactly the script call a test arms it for, and it passes one request at a time across
all its connections: what the server sees, and in which order, is what the test chose, not
what the scheduler happened to do.

- ``drop_next_reply()``: the next script call (EVALSHA/EVAL) reaches the server and runs; its
  reply is thrown away and the client's connection closed, as a network cut after the commit
  would. The proxy then turns every connection away until ``admit()``.
- ``hold_next_script()``: the next script call is kept from the server (the client waits, times
  out, and retries on a new connection, as with a server still reading a large request); it is
  sent on, and its reply thrown away, right after the next request that touches the log has
  been answered.
"""

from __future__ import annotations

import socket
import threading
from typing import BinaryIO

__all__ = ["RespProxy"]

_SCRIPT_CALLS = (b"EVALSHA", b"EVAL")
_LOG_KEYS = b"agent-saga:wal:"


def read_message(stream: BinaryIO) -> tuple[bytes, list[bytes]]:
    """One RESP2/RESP3 message as sent (raw bytes) and the strings it carries (a request's words)."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError("the peer closed the connection")
    kind, size = line[:1], line[1:-2]
    if kind in b"$=!":  # blob string, verbatim string, blob error
        if int(size) < 0:
            return line, []
        data = stream.read(int(size) + 2)
        if len(data) != int(size) + 2:
            raise EOFError("the peer closed the connection mid-message")
        return line + data, [data[:-2]]
    if kind in b"*~>%|":  # array, set, push; map and attribute hold pairs
        count = int(size) * (2 if kind in b"%|" else 1)
        parts, words = [line], []
        for _ in range(max(0, count)):
            raw, inner = read_message(stream)
            parts.append(raw)
            words.extend(inner)
        if kind == b"|":  # an attribute comes before the reply it annotates
            raw, inner = read_message(stream)
            parts.append(raw)
            words.extend(inner)
        return b"".join(parts), words
    return line, []  # simple string, error, integer, null, double, boolean, big number


class RespProxy:
    """Listens on a port of its own and forwards to ``upstream_port`` on 127.0.0.1."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._lock = threading.Lock()  # one request at a time, across every connection
        self._admitting = True
        self._drop_next = False
        self._hold_next = False
        self._held: tuple[bytes, socket.socket, BinaryIO] | None = None
        self.dropped = threading.Event()  # a script's reply was thrown away
        self.held = threading.Event()  # a script call is being kept from the server
        self.released = threading.Event()  # the held script call reached the server and ran
        self._sockets: list[socket.socket] = []
        self._stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- what a test arms -------------------------------------------------------------

    def drop_next_reply(self) -> None:
        with self._lock:
            self._drop_next = True

    def hold_next_script(self) -> None:
        with self._lock:
            self._hold_next = True

    def admitting(self) -> bool:
        return self._admitting

    def admit(self) -> None:
        with self._lock:
            self._admitting = True

    def stop(self) -> None:
        self._stopping = True
        self._listener.close()
        for sock in list(self._sockets):
            _close(sock)

    # -- forwarding -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            if not self.admitting():
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
            self._sockets.append(upstream)
            from_client, from_server = client.makefile("rb"), upstream.makefile("rb")
            while True:
                request, words = read_message(from_client)
                script = bool(words) and words[0].upper() in _SCRIPT_CALLS
                with self._lock:
                    if not self.admitting():  # turned away since this connection was opened
                        return
                    if script and self._hold_next:
                        self._hold_next = False
                        self._held, upstream = (request, upstream, from_server), None
                        self.held.set()
                        break  # the client hears nothing; the socket stays open until released
                    upstream.sendall(request)
                    reply, _ = read_message(from_server)
                    if script and self._drop_next and not reply.startswith(b"-NOSCRIPT"):
                        self._drop_next = False
                        self._admitting = False
                        self.dropped.set()
                        return
                    client.sendall(reply)
                    if self._held is not None and any(_LOG_KEYS in w for w in words[1:]):
                        self._release()
            self.released.wait(60)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            _close(client)
            if upstream is not None:
                _close(upstream)

    def _release(self) -> None:
        """Send the held script call on now, and throw its reply away (lock held)."""
        assert self._held is not None
        request, upstream, from_server = self._held
        self._held = None
        try:
            upstream.sendall(request)
            read_message(from_server)
        finally:
            _close(upstream)
        self.released.set()


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
