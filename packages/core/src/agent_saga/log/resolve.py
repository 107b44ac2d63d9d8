"""The one answer to "which log": what a user typed (a path or a URL), or nothing, into a log.

The rule, written here only: a log is named by ``--wal-path``/``--wal`` or
``$AGENT_SAGA_WAL`` (:data:`LOG_ENV`), else it is the file ``./agent-saga.wal``
(:data:`DEFAULT_LOG_FILE`); a value of a known URL scheme is a server log, any other
``scheme://`` is refused, everything else is a file path. The library's
``default_wal()``, every CLI verb and ``doctor`` all ask this module.

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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from agent_saga.log.base import WAL

__all__ = [
    "DEFAULT_LOG_FILE",
    "LOG_ENV",
    "SCHEMES",
    "ServerWAL",
    "backend_of",
    "chosen_log",
    "default_target",
    "is_url",
    "local_copy",
    "open_log",
]

#: The environment variable that names the log when none is given.
LOG_ENV = "AGENT_SAGA_WAL"
#: The log file used when neither an argument nor ``$AGENT_SAGA_WAL`` names one.
DEFAULT_LOG_FILE = "agent-saga.wal"

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


def chosen_log(env: Mapping[str, str] | None = None) -> str | None:
    """The log ``$AGENT_SAGA_WAL`` names (read now, from ``env`` or the process), None if unset or empty."""
    value = (os.environ if env is None else env).get(LOG_ENV)
    return value or None


def default_target(env: Mapping[str, str] | None = None) -> str:
    """The log used when none is given: ``$AGENT_SAGA_WAL``, else ``./agent-saga.wal``."""
    return chosen_log(env) or DEFAULT_LOG_FILE


def backend_of(target: str | os.PathLike[str]) -> str:
    """``"file"``, ``"postgres"`` or ``"redis"``: the backend ``target`` names.

    A URL of an unknown scheme is refused (ValueError) rather than taken for a file
    name, so a mistyped URL never becomes a directory tree on disk.
    """
    scheme = _scheme(target)
    if scheme is not None:
        return SCHEMES[scheme]
    text = os.fspath(target)
    if "://" in text:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise ValueError(f"{text!r}: unknown log URL scheme; use a file path or one of {known}")
    return "file"


def open_log(target: str | os.PathLike[str] | WAL, **options: Any) -> WAL:
    """The log ``target`` names: a WAL as given, a URL's backend, or a FileWAL at a path.

    ``options`` go to the backend's constructor (``encryptor=``, ``barrier_timeout=``...).
    A URL of an unknown scheme is refused rather than taken for a file name.
    """
    if isinstance(target, WAL):
        return target
    backend = backend_of(target)
    text = os.fspath(target)
    if backend == "file":
        from agent_saga.log.file import FileWAL

        return FileWAL(text, **options)
    if backend == "postgres":
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
