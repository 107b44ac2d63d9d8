"""A one-line progress indicator for long verbs, shown only on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``progress(done, total)`` redraws ``label: done/total`` on stderr, at most every 0.1 s.

    ``megabytes=True`` shows byte counts as megabytes (for verbs that stream a file).
    On anything but a TTY it prints nothing, so piped output and logs stay clean.
    Use as a context manager: the line is cleared at the end.
    """

    def __init__(
        self, label: str, stream: TextIO | None = None, interval: float = 0.1, *, megabytes: bool = False
    ) -> None:
        self.label = label
        self.megabytes = megabytes
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.interval = interval
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        shown = f"{done / 1e6:,.1f}/{total / 1e6:,.1f} MB" if self.megabytes else f"{done:,}/{total:,}"
        self.stream.write(f"\r{self.label}: {shown}")
        self.stream.flush()
        self._drawn = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
