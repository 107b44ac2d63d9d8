"""Claims: exactly one daemon works a saga at a time.

A claim is an exclusive ``flock`` on ``<log>.recovery/claims/<saga id>``. Any
number of daemon processes respect it; the kernel drops it when its holder
dies, so a crashed daemon never strands a saga and no claim needs an expiry.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from agent_saga.log.fs import FILE_MODE, private_dir

__all__ = ["Claim", "try_claim"]


class Claim:
    """A held claim on one saga. Release it (or use ``with``) when done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, remove: bool = False) -> None:
        """Drop the claim; ``remove`` deletes the file first (for a saga that is finished)."""
        if self._fd is None:
            return
        if remove:
            # Unlinked while still locked: a daemon that opened the old file and
            # locks it after us sees that the path now names another inode and retries.
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def try_claim(directory: Path, saga_id: str) -> Claim | None:
    """Claim ``saga_id`` without waiting: the Claim, or None if another process holds it."""
    private_dir(directory)
    path = directory / saga_id
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            return Claim(path, fd)
        os.close(fd)  # the holder before us finished and removed it: claim the new file
