"""Reading a whole log for the verbs that draw or mine it, with one-line errors.

A server log is read through a snapshot file (``cli.options.readable_log``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent_saga.cli.main import EXIT_UNCHECKED, CliError

if TYPE_CHECKING:
    from agent_saga.log.records import Record

__all__ = ["read_log", "write_output"]


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


def write_output(out: str | None, text: str) -> None:
    """Write ``text`` to the file ``out``, or to standard output when it is None."""
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
