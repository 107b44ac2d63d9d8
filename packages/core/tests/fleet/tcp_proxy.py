"""A TCP proxy in front of a real server whose connections a test can cut from the client's side.

``cut()`` closes every connection open through the proxy, both halves, as a network cut or a
client that gave up would: the client reads end-of-file, the server finds its peer gone only
when it next reads or writes that socket. A backend busy meanwhile (committing, waiting on a
lock) carries on with what it already received. New connections pass as before.
"""

from __future__ import annotations

import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Listens on a port of its own and forwards every byte to ``upstream_port`` on 127.0.0.1."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> int:
        """Close every connection open now; how many (client, server) pairs were cut."""
        with self._lock:
            sockets, self._open = self._open, []
            self.cuts += 1
        for sock in sockets:
            _close(sock)
        return len(sockets) // 2

    def stop(self) -> None:
        _close(self._listener)
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
