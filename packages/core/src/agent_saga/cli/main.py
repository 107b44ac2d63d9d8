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
from typing import Any

from agent_saga.inert import inert
from agent_saga.install import pip_install

__all__ = [
    "EXIT_BROKEN_PIPE", "EXIT_FINDING", "EXIT_OK", "EXIT_UNCHECKED", "EXIT_USAGE", "VERBS", "VERB_ENTRY_POINTS",
    "CliError", "main", "quiet_broken_pipe",
]

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_UNCHECKED = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as a shell reports a command ended by SIGPIPE

#: The verbs of this distribution, in the order ``--help`` lists them: the module that defines
#: each (its ``register(verbs)`` adds them, with their options) and the line ``--help`` shows.
#: A verb's module is imported only when that verb is parsed, so ``agent-saga --help`` (and
#: every verb) imports no wing but its own. A wing's verbs live in the wing (``_cli.py``).
VERBS: dict[str, tuple[str, str]] = {
    "adopt": ("agent_saga.cli.adopt",
              "find a project's agent tools and write the module that wraps them (semantics left to you)"),
    "animate": ("agent_saga.ui._cli",
                "animate one saga's run and unwind as a self-contained SVG (no script, no network)"),
    "approvals": ("agent_saga.approvals._cli",
                  "list the requests waiting for a human, and approve, deny or break-glass them"),
    "verify": ("agent_saga.audit._cli", "check the log's hash chain; exit 0 only if intact (or empty)"),
    "export": ("agent_saga.audit._cli", "write a write-once audit bundle (records.jsonl, manifest.json, SHA256SUMS)"),
    "certify": ("agent_saga.audit._cli", "prove every committed effect was compensated or kept by a completed saga"),
    "corpus": ("agent_saga.learning._cli",
               "write a log's steps as labelled training data (KEPT, UNDONE, COLLATERAL, UNKNOWN)"),
    "demo": ("agent_saga.cli.demo", "watch a transaction fail and unwind, on the real engine (no network, no keys)"),
    "doctor": ("agent_saga.cli.doctor", "audit the postures that silently lose effects; exit 1 on blockers"),
    "graph": ("agent_saga.ui._cli", "draw each saga of a log and how it unwound (Mermaid or Graphviz DOT)"),
    "mesh": ("agent_saga.mesh._cli", "merge devices' own logs into one (a G-Set CRDT over their records)"),
    "new": ("agent_saga.cli.new",
            "create a small agent service (FastAPI, saga log, recovery, readiness) to start from"),
    "reconcile": ("agent_saga.reconciliation._cli",
                  "ask the systems whether each logged effect landed and each undo is really in effect"),
    "recover": ("agent_saga.cli.recover", "unwind sagas whose process died (expired lease, no end record)"),
    "escalations": ("agent_saga.cli.recover", "list (or resolve) what recovery handed to a human"),
    "repair": ("agent_saga.cli.repair",
               "continue a dead or quarantined saga (--resume), or hand it back to recovery (--abandon)"),
    "settle": ("agent_saga.cli.settle",
               "say whether a step in doubt (a resume-unknown escalation) landed, signed by an operator key"),
    "signal": ("agent_saga.cli.signal",
               "send a named event (with JSON data) to a @durable run waiting for it, or that will"),
    "snapshots": ("agent_saga.snapshots._cli", "durable snapshots (saga.snapshot with a store): gc"),
    "halt": ("agent_saga.gate._cli", "refuse new steps (globally, for a tool, a tool prefix or a tag), or drain"),
    "drain": ("agent_saga.gate._cli", "start no new sagas; running ones finish (same as halt --drain)"),
    "quarantine": ("agent_saga.gate._cli",
                   "freeze one saga: no further steps, no rollback, no recovery until resumed"),
    "resume": ("agent_saga.gate._cli", "lift a halt, the drain, or a quarantine"),
    "status": ("agent_saga.gate._cli", "show halts, the drain and quarantines in force (exit 1 if any)"),
    "init-host": ("agent_saga.gate._cli",
                  "create the host-wide kill switch and trusted-approver-key locations (run once, as root)"),
    "synthesize": ("agent_saga.synthetic._cli",
                   "fit a shareable profile of a log (--fit), or write a synthetic log from one (--profile)"),
    "ui": ("agent_saga.ui._cli", "serve the time-travel debugger for a log (127.0.0.1 by default)"),
    "viz": ("agent_saga.ui._cli",
            "draw a whole log as SVG: every saga on a timeline, the hash chain, or tool x outcome"),
}


class CliError(Exception):
    """An error to print as one line (no traceback) with its exit code."""

    def __init__(self, message: str, code: int = EXIT_UNCHECKED) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Verbs(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The verbs: each of this distribution's verbs is a placeholder (its name and help) until it
    is parsed; then its module is imported and its ``register(verbs)`` fills the parser in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._filled: set[str] = set()  # the verbs whose module has registered them

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        if isinstance(values, list) and values:  # argparse hands the verb and what follows it
            self.fill(values[0])
        super().__call__(parser, namespace, values, option_string)

    def fill(self, name: str) -> None:
        """Give the verb ``name`` its options (once; a verb of another distribution has them already)."""
        if name in VERBS and name not in self._filled:
            module = VERBS[name][0]
            importlib.import_module(module).register(_Filler(self, module))
            self._filled.update(verb for verb, (home, _text) in VERBS.items() if home == module)


class _Filler:
    """What a verb module's ``register(verbs)`` sees: ``add_parser`` hands back the verb's placeholder."""

    def __init__(self, verbs: _Verbs, module: str) -> None:
        self._verbs, self._module = verbs, module

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if VERBS.get(name, ("", ""))[0] != self._module or "help" in kwargs:
            # A slip in the table or a module, caught by the CLI tests: the help line lives in VERBS.
            raise TypeError(f"{self._module} registers {name!r}: list it in agent_saga.cli.main.VERBS, with "
                            "its help line there, not in add_parser")
        parser: argparse.ArgumentParser = self._verbs.choices[name]
        for key, value in kwargs.items():  # description, epilog, formatter_class
            setattr(parser, key, value)
        return parser


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
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser, action=_Verbs)
    verbs.required = True
    for name, (_module, text) in VERBS.items():
        verbs.add_parser(name, help=text)
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
