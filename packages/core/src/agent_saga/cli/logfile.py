"""Reading a log for the picture verbs: one-line errors, and picking one saga by id prefix.

A server log is read through a snapshot file (``cli.options.readable_log``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent_saga.cli.main import EXIT_UNCHECKED, CliError

if TYPE_CHECKING:
    from agent_saga.log.records import Record
    from agent_saga.ui import GraphSaga

__all__ = ["choose_saga", "read_log", "write_output"]


def read_log(target: Path | str) -> list[Record]:
    """Every record of the log ``target`` names (a file, or a server log's URL); a missing or
    unreadable log is a CliError (exit 3)."""
    from agent_saga.cli.options import readable_log
    from agent_saga.errors import WALCorrupt
    from agent_saga.log import read_records

    with readable_log(target) as path:
        try:
            return list(read_records(path))
        except FileNotFoundError:
            raise CliError(f"no log at {target} (check --wal)", EXIT_UNCHECKED) from None
        except IsADirectoryError:
            raise CliError(f"{target} is a directory, not a log file (check --wal)", EXIT_UNCHECKED) from None
        except (PermissionError, WALCorrupt, UnicodeDecodeError) as err:
            raise CliError(f"cannot read {target}: {err}", EXIT_UNCHECKED) from None


def choose_saga(sagas: Sequence[GraphSaga], prefix: str, where: Path | str) -> GraphSaga:
    """The one saga ``prefix`` names in the log ``where`` (the same rule as every verb that takes a saga id)."""
    from agent_saga.cli.sagaids import pick_saga_id

    chosen = pick_saga_id(prefix, (s.saga_id for s in sagas), str(where))
    return next(s for s in sagas if s.saga_id == chosen)


def write_output(out: str | None, text: str) -> None:
    """Write ``text`` to the file ``out``, or to standard output when it is None."""
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
