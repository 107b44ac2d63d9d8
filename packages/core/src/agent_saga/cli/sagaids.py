"""Saga ids as people type them: a prefix (``graph`` prints 8 characters), resolved against a log.

Every verb that takes a saga id resolves it here, so ``2e78f498`` means the same
saga to all of them: exactly one saga in the log whose id is, or starts with, what
was typed. A whole id is that saga even when it also prefixes another. Anything
else -- several matches, none, no log to check against -- is refused: acting on a
guessed saga (or on none, and saying "done") is worse than asking again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import default_log
from agent_saga.log.resolve import is_url

__all__ = ["pick_saga_id", "resolve_saga_id", "saga_ids"]

_SHOWN = 5  # candidates named in an "ambiguous" refusal


class _NoLog(CliError):
    """There is no log where a saga id was to be checked."""

    def __init__(self, where: str | os.PathLike[str]) -> None:
        super().__init__(f"no log at {os.fspath(where)}: a saga id is checked against the log that holds it; "
                         "name it with --wal-path", EXIT_UNCHECKED)


def saga_ids(path: Path) -> set[str]:
    """The ids of every saga with a record in the log at ``path`` (streamed; bodies are not decrypted)."""
    from agent_saga.log.codec import decode_line
    from agent_saga.log.records import AUDIT_SAGA

    ids: set[str] = set()
    bad: int | None = None
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                if bad is not None:  # a bad line followed by more records is not a torn tail
                    raise CliError(f"cannot read {path}: line {bad} is not a record (agent-saga verify says more)",
                                   EXIT_UNCHECKED)
                try:
                    saga = decode_line(line).get("saga")
                except ValueError:
                    bad = number
                    continue
                if isinstance(saga, str) and saga != AUDIT_SAGA:
                    ids.add(saga)
    except FileNotFoundError:
        raise _NoLog(path) from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a log file (check --wal-path)", EXIT_UNCHECKED) from None
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror or err}", EXIT_UNCHECKED) from None
    return ids


def pick_saga_id(ref: str, candidates: Iterable[str], where: str) -> str:
    """The one id in ``candidates`` that is ``ref`` or starts with it; CliError (exit 2) otherwise."""
    ref = (ref or "").strip().rstrip(".")  # people paste the "2e78f498..." they were shown
    if not ref:
        raise CliError("give a saga id (or the start of one, as 'agent-saga graph' prints it)", EXIT_USAGE)
    ids = set(candidates)
    if ref in ids:
        return ref
    matches = sorted(i for i in ids if i.startswith(ref))
    if not matches:
        raise CliError(f"no saga in {where} has an id starting with {ref!r}", EXIT_USAGE)
    if len(matches) > 1:
        shown = ", ".join(matches[:_SHOWN]) + (f" and {len(matches) - _SHOWN} more" if len(matches) > _SHOWN else "")
        raise CliError(f"{ref!r} matches {len(matches)} sagas in {where} ({shown}): give more of the id",
                       EXIT_USAGE)
    return matches[0]


def resolve_saga_id(ref: str, log: str | os.PathLike[str] | None = None, *, also: Iterable[str] = ()) -> str:
    """The full id of the saga ``ref`` names in ``log`` (default: ``cli.options.default_log()``).

    ``log`` is a file or a server log's URL. ``also`` adds ids known from elsewhere (a
    quarantine in the switch store); with some, a missing log is not an error.
    """
    target = os.fspath(log) if log is not None else default_log()
    extra = set(also)
    try:
        ids = _server_saga_ids(target) if is_url(target) else saga_ids(Path(target))
    except _NoLog:
        if not extra:
            raise
        return pick_saga_id(ref, extra, "the switch store")
    return pick_saga_id(ref, ids | extra, target)


def _server_saga_ids(url: str) -> set[str]:
    """The ids of every saga with a record in a server log (read through a snapshot)."""
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.log.resolve import local_copy
    from agent_saga.log.server import LogNotFound

    try:
        with local_copy(url) as copy:
            return saga_ids(copy)
    except LogNotFound:
        raise _NoLog(url) from None
    except (WALError, ConfigurationError) as err:
        raise CliError(f"cannot read {url}: {err}", EXIT_UNCHECKED) from None
