"""Small state files shared between processes: read whole, replaced atomically, created with chosen modes.

The kill switch and the approval file store both keep state a reader must see
either before or after a change, never half-way: a writer holds an exclusive lock,
writes a temporary file, fsyncs it, renames it over the old one and fsyncs the
directory. Modes are set explicitly (the umask of whichever process happens to
create a file must not decide who can read an approval or a halt):

* a lock file is never readable by others: whoever can open it can ``flock`` it,
  and a reader holding it forever would block every writer;
* a file gains group read/write exactly when its directory grants them, so an
  operator shares a store with a group by creating its directory that way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent_saga.gate._stores import StoreUnavailable

__all__ = ["append_line", "group_shared", "locked", "make_dirs", "read_state", "replace_file"]


def group_shared(directory: Path, mode: int) -> int:
    """``mode`` plus the group read/write bits ``directory`` grants."""
    try:
        return mode | (os.stat(directory).st_mode & 0o060)
    except OSError:
        return mode


def make_dirs(path: Path, mode: int) -> None:
    """``mkdir -p path``; each directory it creates gets exactly ``mode``. Raises OSError."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode)
        except FileExistsError:
            continue  # another process made it first: its mode is its creator's business
        directory.chmod(mode)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to a host list every agent reads (trusted keys, passkeys), durably. Raises OSError.

    The list is created 0644 in 0755 directories: only its owner (root) should be able to
    change it, or an agent could trust a key of its own.
    """
    make_dirs(path.parent, 0o755)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            os.fchmod(fd, 0o644)  # new (or empty): whatever the umask, every agent reads it
        elif os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line  # someone edited it by hand and left no final newline
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path, mode: int) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``, creating it with ``mode`` if missing. Raises OSError."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        os.fchmod(fd, mode)
    except FileExistsError:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def replace_file(path: Path, text: str, mode: int) -> None:
    """Make ``path`` hold ``text`` (with ``mode``), durably, in one rename. Raises OSError."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".part", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)  # the rename itself must survive a power cut
    finally:
        os.close(dirfd)


def read_state(path: Path, what: str) -> str | None:
    """The text of ``path`` (None if it does not exist); StoreUnavailable if it cannot be read as UTF-8."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StoreUnavailable(f"cannot read {what} {path}: {err.strerror or err}") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise StoreUnavailable(
            f"{what} {path} is not UTF-8 text (byte {err.start}); it was not written by agent-saga: fix or remove it"
        ) from err
