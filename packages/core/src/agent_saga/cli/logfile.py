"""Reading a log for the picture verbs: one-line errors, and picking one saga by id prefix."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent_saga.cli.main import EXIT_UNCHECKED, CliError

if TYPE_CHECKING:
    from agent_saga.log.records import Record
    from agent_saga.viz.model import GraphSaga

__all__ = ["choose_saga", "read_log", "write_output"]


def read_log(path: Path) -> list[Record]:
    """Every record of the log at ``path``; a missing or unreadable log is a CliError (exit 3)."""
    from agent_saga.errors import WALCorrupt
    from agent_saga.log import read_records

    try:
        return list(read_records(path))
    except FileNotFoundError:
        raise CliError(f"no log at {path} (check --wal)", EXIT_UNCHECKED) from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a log file (check --wal)", EXIT_UNCHECKED) from None
    except (PermissionError, WALCorrupt, UnicodeDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}", EXIT_UNCHECKED) from None


def choose_saga(sagas: Sequence[GraphSaga], prefix: str, path: Path) -> GraphSaga:
    """The one saga ``prefix`` names (the same rule as every verb that takes a saga id)."""
    from agent_saga.cli.sagaids import pick_saga_id

    chosen = pick_saga_id(prefix, (s.saga_id for s in sagas), str(path))
    return next(s for s in sagas if s.saga_id == chosen)


def write_output(out: str | None, text: str) -> None:
    """Write ``text`` to the file ``out``, or to standard output when it is None."""
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
