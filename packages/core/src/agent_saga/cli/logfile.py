"""Reading a log for the read-only verbs: one-line errors, and picking one saga by id prefix.

A log is a file path or a server URL (``postgresql://``, ``redis://``); see ``log.resolve``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError

if TYPE_CHECKING:
    from agent_saga.log.records import Record
    from agent_saga.viz.model import GraphSaga

__all__ = ["choose_saga", "read_log", "readable_log", "write_output"]


@contextmanager
def readable_log(target: str | Path) -> Iterator[Path]:
    """A file holding the log ``target`` names (a server log's snapshot; see ``log.resolve.local_copy``).

    A server log that is missing or unreachable is a CliError (exit 3).
    """
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.log.resolve import is_url, local_copy

    if not is_url(target):
        yield Path(target)
        return
    try:
        with local_copy(target) as path:
            yield path
    except (WALError, ConfigurationError) as err:
        raise CliError(f"cannot read {target}: {err}", EXIT_UNCHECKED) from None


def read_log(path: str | Path) -> list[Record]:
    """Every record of the log at ``path`` (a file or a URL); a missing or unreadable log is a CliError (exit 3)."""
    from agent_saga.errors import WALCorrupt
    from agent_saga.log import read_records
    from agent_saga.log.resolve import is_url

    if is_url(path):
        with readable_log(path) as copy:
            return read_log(copy)
    try:
        return list(read_records(path))
    except FileNotFoundError:
        raise CliError(f"no log at {path} (check --wal)", EXIT_UNCHECKED) from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a log file (check --wal)", EXIT_UNCHECKED) from None
    except (PermissionError, WALCorrupt, UnicodeDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}", EXIT_UNCHECKED) from None


def choose_saga(sagas: Sequence[GraphSaga], prefix: str, path: str | Path) -> GraphSaga:
    """The one saga whose id starts with ``prefix``; none or several is a usage error."""
    chosen = [s for s in sagas if s.saga_id.startswith(prefix)]
    if not chosen:
        raise CliError(f"no saga in {path} has an id starting with {prefix!r}", EXIT_USAGE)
    if len(chosen) > 1:
        raise CliError(f"{prefix!r} matches {len(chosen)} sagas; give more of the id", EXIT_USAGE)
    return chosen[0]


def write_output(out: str | None, text: str) -> None:
    """Write ``text`` to the file ``out``, or to standard output when it is None."""
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
