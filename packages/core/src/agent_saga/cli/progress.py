"""A one-line progress indicator for long verbs, shown only on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``progress(done, total)`` redraws ``label: done/total`` on stderr, at most every 0.1 s.

    On anything but a TTY it prints nothing, so piped output and logs stay clean.
    Use as a context manager: the line is cleared at the end.
    """

    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 0.1) -> None:
        self.label = label
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
        self.stream.write(f"\r{self.label}: {done:,}/{total:,}")
        self.stream.flush()
        self._drawn = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
