"""File-system helpers shared by everything that keeps evidence on disk.

Files and directories the library creates are private to their owner (0600 and
0700): a log, a ledger or an escalation queue holds tool arguments and outcomes,
which are nobody else's business on a shared host. Existing files keep the mode
their owner gave them.

Readers open a log with :func:`open_regular`: a path that names a FIFO, a device
or a directory is refused at once instead of blocking on it or reading garbage.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

__all__ = ["DIR_MODE", "FILE_MODE", "NotARegularFile", "fsync_dir", "open_regular", "private_dir", "write_new"]

FILE_MODE = 0o600
DIR_MODE = 0o700


class NotARegularFile(OSError):
    """The path exists but is a directory, FIFO, socket or device, not a file."""


def fsync_dir(path: Path) -> None:
    """Make a file's creation, rename or removal in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (existing ones are left alone).

    ``Path.mkdir(parents=True)`` gives the parents the default mode, not the one asked.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(DIR_MODE)
        except FileExistsError:
            pass  # created meanwhile by another process
    if missing and not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")


def write_new(path: Path, chunks: Iterable[bytes], mode: int = FILE_MODE) -> int:
    """Create ``path`` (which must not exist) with ``mode``, write ``chunks``, sync; return the size.

    A write that fails half-way (a full disk) removes the file again: never an empty
    or partial file left behind.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    size = 0
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            size += len(chunk)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return size


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a log for reading; raise NotARegularFile (an OSError) unless it is a regular file.

    Opened non-blocking and checked on the descriptor, so a FIFO can neither hang
    the open nor be swapped in between a check and the open.
    """
    text = os.fspath(path)
    if not text:
        raise FileNotFoundError(2, "the path is empty; give the log file's path", text)
    fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(
                f"{text} is {_kind(mode)}, not a log file; give the path of the log itself"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
