"""Entry point of the ``agent-saga`` command.

Exit codes, the same for every verb: 0 ok; 1 a finding (a broken chain, drift,
an unaccounted effect); 2 a usage error; 3 could not check (a missing or
unreadable file, an unreachable store); 141 stdout's reader went away (``| head``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from agent_saga.inert import inert
from agent_saga.install import pip_install

__all__ = [
    "EXIT_BROKEN_PIPE", "EXIT_FINDING", "EXIT_OK", "EXIT_UNCHECKED", "EXIT_USAGE", "VERB_ENTRY_POINTS",
    "CliError", "main", "quiet_broken_pipe",
]

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_UNCHECKED = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as a shell reports a command ended by SIGPIPE

# Verb modules under agent_saga.cli; each defines register(subparsers).
VERB_MODULES = (
    "adopt", "animate", "approvals", "audit", "corpus", "demo", "doctor", "graph", "mesh", "new", "reconcile", "recover",
    "repair", "settle", "snapshots", "switch", "synthesize", "ui", "viz",
)


class CliError(Exception):
    """An error to print as one line (no traceback) with its exit code."""

    def __init__(self, message: str, code: int = EXIT_UNCHECKED) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


#: Other distributions add verbs through this entry-point group: each entry point names a
#: module (or object) with ``register(verbs)``, like the core's own verb modules.
VERB_ENTRY_POINTS = "agent_saga_cli"
# Verbs that live in a distribution of their own, for the message when it is not installed.
_VERB_HOMES = {"mcp": "agent-saga-mcp", "temporal": "agent-saga-temporal"}


def build_parser() -> argparse.ArgumentParser:
    from agent_saga._version import __version__

    parser = _Parser(
        prog="agent-saga",
        description="Transactional side effects for AI agents.",
        epilog="exit codes: 0 ok, 1 finding, 2 usage error, 3 could not check (docs/CLI.md has the table)",
    )
    parser.add_argument("--version", action="version", version=f"agent-saga {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True
    for name in VERB_MODULES:
        importlib.import_module(f"agent_saga.cli.{name}").register(verbs)
    for ep in metadata.entry_points(group=VERB_ENTRY_POINTS):
        try:
            ep.load().register(verbs)
        except Exception as err:  # noqa: BLE001 - a broken plugin must not take the whole CLI down
            print(f"agent-saga: the verbs of {ep.value} could not be loaded ({type(err).__name__}: {err})",
                  file=sys.stderr)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    if first in _VERB_HOMES and first not in _registered_verbs(parser):
        print(f"agent-saga {first}: this verb comes with {_VERB_HOMES[first]}; install it: "
              f"{pip_install(_VERB_HOMES[first])}", file=sys.stderr)
        return EXIT_UNCHECKED
    args, extra = parser.parse_known_args(argv)
    if extra:  # let the verb's own parser complain, with the verb's usage line
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verbs.choices[args.verb].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, so that a reader gone away (`| head`) is caught below
    except BrokenPipeError:
        return quiet_broken_pipe()
    except CliError as err:
        # One line, whatever the message quotes from the log or the store (inert: escaped, visible).
        print(f"agent-saga {args.verb}: {inert(err)}", file=sys.stderr)
        return err.code
    except OSError as err:
        # A file or directory the verb needed could not be used: say which, no traceback.
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        print(f"agent-saga {args.verb}: {err.strerror or err}{where}", file=sys.stderr)
        return EXIT_UNCHECKED
    except KeyboardInterrupt:
        return 130
    return int(code or 0)


def quiet_broken_pipe() -> int:
    """End quietly when stdout's reader has gone (``agent-saga ... | head``), as a shell expects.

    Output already buffered is dropped (pointing stdout at /dev/null, so the flush at
    exit cannot raise again); the code is the one a shell reports for SIGPIPE.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _registered_verbs(parser: argparse.ArgumentParser) -> set[str]:
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(verbs.choices)


if __name__ == "__main__":
    sys.exit(main())
