"""Where recovery keeps its files: next to the log, in ``<log>.recovery/``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["file_log_path", "recovery_dir"]


def recovery_dir(wal_path: str | os.PathLike[str]) -> Path:
    """Where leases, claims, the ledger and the escalation queue of a log live."""
    path = Path(wal_path).absolute()
    return path.with_name(f"{path.name}.recovery")


def file_log_path(wal: object) -> Path | None:
    """The file behind a durable log (a FileWAL), or None: only a file log can be recovered."""
    if not getattr(wal, "durable", False):
        return None
    path = getattr(wal, "path", None)
    return path if isinstance(path, Path) else None  # a Path is immutable: no copy needed
