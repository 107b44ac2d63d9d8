"""The stdio plumbing around :class:`~agent_saga_mcp.core.ProxyCore`.

The proxy is the client's server: it reads the client's stdin and writes its stdout, and
runs the real server as a child process whose stdin/stdout it owns (the child's stderr is
the proxy's). Lines are split on ``\\n`` with no size limit, so a huge message passes; what
is written to either side is the core's own encoding of what it parsed, never these lines
(see :mod:`agent_saga_mcp.wire`).

How it ends decides what happens to the open saga (``--boundary session``/``explicit``):

* the client closes stdin (EOF): calls in flight settle, the saga is **committed**, the
  server's stdin is closed and the proxy exits with 0 once the server is gone;
* the server exits first: calls waiting for it fail (their steps are UNKNOWN), the saga is
  **left open** and the proxy exits 1; as when the proxy itself is killed, the recovery
  daemon unwinds it once its lease expires;
* the policy does not fit the server (first tools/list): the pending request gets an
  error, the server is stopped and the proxy exits 2;
* the proxy cannot start at all (a policy refused when it is loaded, a bad flag):
  :func:`refuse_start` answers the client's first request with a JSON-RPC error carrying
  the message, so that an MCP client shows why, not only that the connection closed; the
  server is never started and the proxy exits 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import IO, Any

from agent_saga_mcp.core import ErrorCode, ProxyConfig, ProxyCore
from agent_saga_mcp.wire import LineRefused, encode, read_client_line

__all__ = ["EXIT_FATAL", "EXIT_SERVER_GONE", "EXIT_START", "START_REFUSAL_WAIT", "lines", "refuse_start", "run_proxy"]

EXIT_SERVER_GONE, EXIT_FATAL, EXIT_START = 1, 2, 3
_CHUNK = 1 << 16
#: How long a proxy that cannot start waits for the client's first request, to answer it.
START_REFUSAL_WAIT = 10.0


async def lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Split a byte stream into lines (without the newline); a last unterminated line counts."""
    buffer = bytearray()
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer:
        yield bytes(buffer)


async def _stream_chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while chunk := await reader.read(_CHUNK):
        yield chunk


async def _file_chunks(file: IO[bytes]) -> AsyncIterator[bytes]:
    # A thread reads stdin: it works for pipes, files and terminals alike, where
    # connect_read_pipe does not.
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def pump() -> None:
        read = getattr(file, "read1", file.read)
        while True:
            try:
                chunk = read(_CHUNK)
            except (OSError, ValueError):
                chunk = b""
            loop.call_soon_threadsafe(queue.put_nowait, chunk)
            if not chunk:
                return

    threading.Thread(target=pump, name="agent-saga-mcp-stdin", daemon=True).start()
    while chunk := await queue.get():
        yield chunk


def refuse_start(
    message: str, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None, wait: float = START_REFUSAL_WAIT
) -> None:
    """Answer the client's first request with a JSON-RPC error carrying ``message`` (the proxy cannot start).

    An MCP client starts the proxy and sends ``initialize`` at once; exiting without a word
    leaves it only "connection closed". Notifications before that request are skipped; a
    line that cannot be read is answered (with its id where it still reads as a request).
    Gives up at EOF, after ``wait`` seconds, or at once on a terminal (a person reads stderr there).
    """
    client_in = stdin if stdin is not None else sys.stdin.buffer
    client_out = stdout if stdout is not None else sys.stdout.buffer
    with contextlib.suppress(OSError, ValueError):
        if client_in.isatty():
            return
        id_ = _first_request(client_in.fileno(), time.monotonic() + wait)
        if id_ is not _NO_REQUEST:
            error = {"code": int(ErrorCode.PROXY_ERROR), "message": message}
            client_out.write(encode({"jsonrpc": "2.0", "id": id_, "error": error}) + b"\n")
            client_out.flush()


_NO_REQUEST = object()


def _first_request(fd: int, deadline: float) -> Any:
    """The id of the first request read from ``fd`` before ``deadline`` (None for an unreadable line)."""
    buffer = b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                message = read_client_line(line)
            except LineRefused as refused:
                return refused.id
            for member in message if isinstance(message, list) else [message]:
                if isinstance(member, dict) and "method" in member and "id" in member:
                    id_ = member["id"]
                    return id_ if isinstance(id_, (str, int)) and not isinstance(id_, bool) else None
    return _NO_REQUEST


async def run_proxy(
    config: ProxyConfig,
    command: list[str],
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    settle_timeout: float = 30.0,
) -> int:
    """Run one proxy session between ``stdin``/``stdout`` and the server ``command``."""
    client_in = stdin if stdin is not None else sys.stdin.buffer
    client_out = stdout if stdout is not None else sys.stdout.buffer
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=config.server.get("cwd"),
        )
    except OSError as err:
        print(f"agent-saga mcp: cannot start the server {command!r}: {err.strerror or err}", file=sys.stderr)
        return EXIT_START
    assert proc.stdin is not None
    assert proc.stdout is not None
    server_in, server_out = proc.stdin, proc.stdout
    out_lock = asyncio.Lock()
    in_lock = asyncio.Lock()

    async def to_server(data: bytes) -> None:
        async with in_lock:
            if server_in.is_closing():
                return
            server_in.write(data)
            with contextlib.suppress(ConnectionError):
                await server_in.drain()

    async def to_client(data: bytes) -> None:
        def write() -> None:
            client_out.write(data)
            client_out.flush()

        async with out_lock:
            with contextlib.suppress(OSError, ValueError):
                await asyncio.to_thread(write)

    core = ProxyCore(config, to_server, to_client)
    core.attach()

    async def client_pump() -> None:
        async for line in lines(_file_chunks(client_in)):
            await core.from_client(line)
            if core.stopped.is_set():
                return

    async def server_pump() -> None:
        async for line in lines(_stream_chunks(server_out)):
            await core.from_server(line)

    client = asyncio.ensure_future(client_pump())
    server = asyncio.ensure_future(server_pump())
    stopped = asyncio.ensure_future(core.stopped.wait())
    try:
        await asyncio.wait({client, server, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if core.fatal is not None:
            await core.drain()
            return EXIT_FATAL
        if client.done() and not server.done():
            client.result()
            # Let calls in flight get their answers, then end the server's input; an answer
            # that never comes (a hung tool) leaves its step UNKNOWN rather than the proxy stuck.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(core.drain()), timeout=settle_timeout)
            async with in_lock:
                server_in.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(server), timeout=settle_timeout)
            core.server_gone()
            await core.close()
            return EXIT_FATAL if core.fatal is not None else 0
        core.server_gone()
        await core.drain()
        open_sagas = [s.saga_id for s in core.sagas if s.status.value == "OPEN"]
        detail = f"; open saga {', '.join(open_sagas)} is left for the recovery daemon" if open_sagas else ""
        print(f"agent-saga mcp: the server exited (code {await proc.wait()}){detail}", file=sys.stderr, flush=True)
        return EXIT_SERVER_GONE
    finally:
        core.detach()
        for task in (client, server, stopped):
            task.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if config.wal is not None:
            config.wal.close()
