"""Options every verb shares, defined once: which log a verb reads, and how it is checked.

Every verb that reads or writes a log takes ``--wal-path LOG`` (alias ``--wal``), added
here; left out, the log is ``$AGENT_SAGA_WAL``, else ``./agent-saga.wal`` -- read when the
verb runs, not when the parser is built, so the help text and the behaviour say the same
thing. A log is a file path or a server log's URL (``postgresql://``, ``redis://``). The
rule itself (the variable, the default file, file or URL) is ``agent_saga.log.resolve``'s,
the same the library's ``default_wal()`` follows.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.log.resolve import DEFAULT_LOG_FILE, LOG_ENV, SCHEMES, backend_of, default_target, is_url

if TYPE_CHECKING:
    from agent_saga.log.base import WAL

__all__ = [
    "LOG_ENV",
    "add_group",
    "add_imports_option",
    "add_json_option",
    "add_log_option",
    "add_out_option",
    "add_reason_options",
    "add_verb",
    "default_log",
    "existing_log",
    "given_log",
    "import_modules",
    "log_target",
    "open_log_to_write",
    "read_as_file",
    "readable_log",
]

_DEFAULT_TEXT = f"${LOG_ENV}, else ./{DEFAULT_LOG_FILE}"


def add_verb(verbs: Any, name: str, run: Callable[[argparse.Namespace], int], *, examples: str,
             about: str | None = None, raw: bool = True, **more: Any) -> argparse.ArgumentParser:
    """A verb's (or one of its actions') parser: what it does, its examples under the options, and
    the function that runs it. ``raw``: the text is shown as written (line breaks kept); otherwise it
    is re-wrapped, and ``about`` may be left to ``run``'s docstring. ``more`` passes on to
    ``add_parser`` (an action's ``help``)."""
    if raw:
        more["formatter_class"] = argparse.RawDescriptionHelpFormatter
    elif about is None:
        about = inspect.getdoc(run)
    p: argparse.ArgumentParser = verbs.add_parser(name, description=about, epilog=examples, **more)
    p.set_defaults(run=run)
    return p


def add_group(verbs: Any, name: str, dest: str, *, about: str, examples: str, metavar: str = "ACTION") -> Any:
    """A verb made of actions (``agent-saga mesh merge``): its parser, and the actions' sub-parsers
    to :func:`add_verb` each action to (one is required; the chosen one's name lands in ``dest``)."""
    p = verbs.add_parser(name, description=about, epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Nested parsers inherit the verb's class, so usage errors exit 2 like every verb.
    return p.add_subparsers(dest=dest, metavar=metavar, required=True)


def add_json_option(p: argparse.ArgumentParser, what: str = "the report") -> None:
    """``--json``: print ``what`` as one JSON document instead of lines for people."""
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_reason_options(p: argparse.ArgumentParser, who: str = "--by", *, reason_required: bool = True) -> None:
    """``--reason WHY`` and ``--by WHO`` (or ``who``, e.g. ``--operator``): what a verb that changes
    something records in the log with the change."""
    p.add_argument("--reason", required=reason_required, default="", metavar="WHY", help="why (recorded in the log)")
    p.add_argument(who, required=True, metavar="WHO", help="who (recorded in the log)")


def add_out_option(p: argparse.ArgumentParser) -> None:
    """``-o/--out FILE``: where a verb that draws or writes text puts it (standard output by default)."""
    p.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")


def default_log() -> str:
    """The log a verb reads when not told: ``$AGENT_SAGA_WAL``, else ``./agent-saga.wal``."""
    return default_target()


def add_log_option(p: argparse.ArgumentParser, what: str = "the log to read", *, optional: bool = False,
                   default: str | None = None) -> None:
    """``--wal-path``/``--wal``; ``optional`` for verbs that only write to a log if there is one;
    ``default`` replaces the help's default text for a verb whose default differs (e.g. doctor)."""
    if default is None:
        default = f"only a log given here, or an existing {_DEFAULT_TEXT}" if optional else _DEFAULT_TEXT
    p.add_argument("--wal-path", "--wal", dest="wal_path", metavar="LOG", default=None,
                   help=f"{what}: a file, or a postgresql:// or redis:// URL (default: {default})")


def given_log(args: argparse.Namespace) -> str:
    """The log the command line names, or the default; a URL of no known scheme is a usage error."""
    raw: str | None = args.wal_path
    target = default_log() if raw is None else raw
    try:
        backend_of(target)
    except ValueError as err:  # e.g. postgresq://: never read as a file of that name
        raise CliError(str(err), EXIT_USAGE) from None
    return target


def read_as_file(target: str) -> str:
    """What to add when ``target`` was read as a file path but looks like a mistyped log URL."""
    if ":" not in target or is_url(target):
        return ""
    known = ", ".join(f"{scheme}://" for scheme in SCHEMES)
    return f"; it was read as a file path (a log URL starts with one of {known})"


def existing_log(args: argparse.Namespace) -> Path:
    """The log file to read, checked: an empty path is a usage error, a missing or odd file exit 3."""
    raw = given_log(args)
    if not raw.strip():
        raise CliError(f"--wal-path is empty: give the log file's path (or set ${LOG_ENV})", EXIT_USAGE)
    path = Path(raw)
    if not path.exists():
        raise CliError(f"no log at {path} (give --wal-path, or set ${LOG_ENV}){read_as_file(raw)}", EXIT_UNCHECKED)
    if path.is_dir():
        raise CliError(f"{path} is a directory, not a log file (check --wal-path)", EXIT_UNCHECKED)
    if not path.is_file():
        raise CliError(f"{path} is not a regular file (a FIFO or a device?): give the log itself", EXIT_UNCHECKED)
    return path


def log_target(args: argparse.Namespace) -> Path | str:
    """The log to read: a server log's URL as given (its server answers when it is opened), else
    the file, checked as :func:`existing_log` checks it."""
    raw = given_log(args)
    return raw if is_url(raw) else existing_log(args)


@contextmanager
def readable_log(target: Path | str) -> Iterator[Path]:
    """A file holding the log ``target`` names: a path as it is, or a private snapshot of a
    server log (removed afterwards; see ``log.resolve.local_copy``).

    A server log that is missing or unreachable is a CliError (exit 3). Errors raised
    by the caller's own block pass through unchanged.
    """
    if not is_url(target):
        yield Path(target)
        return
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.log.resolve import local_copy

    with ExitStack() as stack:
        try:
            path = stack.enter_context(local_copy(target))
        except (WALError, ConfigurationError) as err:
            raise CliError(f"cannot read {target}: {err}", EXIT_UNCHECKED) from None
        yield path


def open_log_to_write(target: str, *, create: bool = True) -> WAL | None:
    """The log a verb records a change in; exit 3 if it cannot be opened.

    ``create=False`` (a default log, never created unasked): None when there is no
    such log yet, a file or a server log alike.
    """
    from agent_saga.errors import WALError
    from agent_saga.log.resolve import open_log
    from agent_saga.log.server import LogNotFound

    if not create and not is_url(target) and not Path(target).exists():
        return None
    try:
        return open_log(target) if create or not is_url(target) else open_log(target, create=False)
    except LogNotFound:
        return None
    except (OSError, WALError, ValueError) as err:
        raise CliError(f"cannot open the log {target}: {getattr(err, 'strerror', None) or err}",
                       EXIT_UNCHECKED) from None


def add_imports_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--import MODULE`` (repeatable): modules that register what the verb needs (``what``)."""
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help=f"import MODULE first, so its {what} are registered (repeatable)")


def import_modules(modules: Sequence[str], what: str) -> None:
    """Import each ``--import`` module; one that fails is a usage error naming it."""
    # A console script does not put the working directory on sys.path; `python -m` does.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any import failure is the user's to fix, reported in one line
            raise CliError(
                f"--import {name}: could not import it ({type(err).__name__}: {err}); give an "
                f"importable module name (not a file path) that declares your {what}",
                EXIT_USAGE,
            ) from None
