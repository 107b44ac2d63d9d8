"""``agent-saga reconcile``: ask the outside systems whether the log's effects are what it says.

A thin front over :func:`agent_saga.reconciliation.reconcile`; a server log's URL is
read through a snapshot (``cli.options.readable_log``). Exit codes: 0 clean
(every effect checked and agreeing); 1 drift, or a chain that does not verify;
2 usage (an ``--import`` that fails); 3 something could not be verified (no
reconciler, a system that could not tell, a check that timed out) or the log could
not be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_UNCHECKED, CliError
from agent_saga.cli.options import (
    add_imports_option,
    add_json_option,
    add_log_option,
    add_verb,
    import_modules,
    log_target,
    readable_log,
)

__all__ = ["register", "run_reconcile"]


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "reconcile", run_reconcile,
        about=(
            "A later, separate pass that does not take the log's word: for every effect in "
            "the log it asks the @reconciler registered for the tool (did it land?) and for its undo (is "
            "the undo in effect?), and reports drift. Unverifiable is never counted as confirmed. "
            "Reads only: nothing is written to the log."
        ),
        examples=(
            "example: agent-saga reconcile --wal-path agent-saga.wal --import agent_saga.connectors.stripe\n"
            "exit codes: 0 clean, 1 drift (or a chain that does not verify), 2 usage, 3 could not verify"
        ),
    )
    add_log_option(p, "the log whose effects to check")
    add_imports_option(p, "@reconciler functions")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="bound on each question to a system (default: %(default)s)")
    add_json_option(p)
    p.add_argument("--trust-unverified", action="store_true",
                   help="reconcile a log whose chain does not verify (the report says so)")


def run_reconcile(args: argparse.Namespace) -> int:
    from agent_saga.errors import WALError
    from agent_saga.log.chain import ChainUnverified
    from agent_saga.reconciliation import reconcile

    if not args.timeout > 0:
        raise CliError(f"--timeout must be a positive number of seconds, got {args.timeout:g}", 2)
    target = log_target(args)
    import_modules(args.imports, "@reconciler functions")
    try:
        with readable_log(target) as path:
            report = reconcile(path, timeout=args.timeout, trust_unverified=args.trust_unverified)
        if isinstance(target, str):  # a URL names the log, not its snapshot
            report = dataclasses.replace(report, log=target)
    except ChainUnverified as err:
        where = target if isinstance(target, str) else target.absolute()
        raise CliError(str(ChainUnverified.refusing(
            where, err.report, "reconcile it",
            "investigate, then rerun with --trust-unverified to reconcile it anyway",
        )), EXIT_FINDING) from None
    except WALError as err:
        raise CliError(f"could not read {target}: {err}", EXIT_UNCHECKED) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report.format_text(), end="")
    return report.exit_code
