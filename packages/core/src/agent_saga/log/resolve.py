"""One place that turns what a user typed (a path or a URL) into a log.

``open_log`` is what every command that takes ``--wal-path`` calls: a path opens
a FileWAL, ``postgresql://`` / ``postgres://`` a PostgresWAL and ``redis://`` /
``rediss://`` / ``unix://`` a RedisWAL (each backend imported only then, naming
its extra if missing). ``local_copy`` gives the read-only tools (verify, export,
certify, graph, viz) a file to read: the path itself, or for a URL a private
snapshot of the stored lines, byte for byte what a file log would hold.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from agent_saga.log.base import WAL

__all__ = ["SCHEMES", "ServerWAL", "is_url", "local_copy", "open_log"]

#: URL schemes and the backend each opens.
SCHEMES = {
    "postgresql": "postgres", "postgres": "postgres",
    "redis": "redis", "rediss": "redis", "unix": "redis",
}


class ServerWAL(Protocol):
    """What the recovery daemon, the UI and the snapshot read from a server-backed log."""

    location: str

    def lines_after(self, seq: int = 0) -> Iterator[tuple[int, str]]: ...

    def head(self) -> tuple[int, str, int]: ...


def _scheme(target: str | os.PathLike[str]) -> str | None:
    text = os.fspath(target)
    scheme, sep, _ = text.partition("://")
    return scheme.lower() if sep and scheme.lower() in SCHEMES else None


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a server log (a URL of a known scheme) rather than a file."""
    return _scheme(target) is not None


def open_log(target: str | os.PathLike[str] | WAL, **options: Any) -> WAL:
    """The log ``target`` names: a WAL as given, a URL's backend, or a FileWAL at a path.

    ``options`` go to the backend's constructor (``encryptor=``, ``barrier_timeout=``...).
    A URL of an unknown scheme is refused rather than taken for a file name.
    """
    if isinstance(target, WAL):
        return target
    scheme = _scheme(target)
    text = os.fspath(target)
    if scheme is None and "://" in text:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise ValueError(f"{text!r}: unknown log URL scheme; use a file path or one of {known}")
    if scheme is None:
        from agent_saga.log.file import FileWAL

        return FileWAL(text, **options)
    if SCHEMES[scheme] == "postgres":
        from agent_saga.log.postgres import PostgresWAL

        return PostgresWAL(text, **options)
    from agent_saga.log.redis import RedisWAL

    return RedisWAL(text, **options)


@contextmanager
def local_copy(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A file holding the log ``target`` names: the path itself, or a snapshot of a server log.

    The snapshot (0600, removed on exit) holds the stored lines in sequence
    order, one consistent read, so a file tool reads exactly what the server holds.
    """
    if not is_url(target):
        yield Path(target)
        return
    wal = open_log(target, create=False)
    try:
        reader: Any = wal
        fd, name = tempfile.mkstemp(prefix="agent-saga-snapshot-", suffix=".wal")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                for _, line in reader.lines_after(0):
                    fh.write(line + "\n")
            yield Path(name)
        finally:
            os.unlink(name)
    finally:
        wal.close()
