"""``agent-saga mesh merge``: merge the logs devices wrote apart into one log every verb reads."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, CliError

__all__ = ["register", "run_merge"]


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "mesh",
        help="merge devices' own logs into one (a G-Set CRDT over their records)",
        description="Offline mesh sagas: each device keeps its own log; merge them, in any order, any number of times.",
        epilog="example:\n  agent-saga mesh merge phone.wal laptop.wal --out merged.wal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="mesh_verb", metavar="ACTION", required=True)
    m = sub.add_parser(
        "merge",
        help="merge device logs (or merged logs) into one log",
        description=(
            "Merge device logs into one chained log: any order, grouping and repetition of the same logs gives "
            "the same bytes. Each device's chain is verified; a record that does not verify is named with "
            "everything after it on that device's chain, and left out."
        ),
        epilog=(
            "exit codes: 0 merged, nothing left out; 1 merged, but records were left out or two devices' steps "
            "of one saga share an idempotency key (listed); "
            "3 an input could not be used at all (nothing written)\n"
            "example:\n  agent-saga mesh merge phone.wal laptop.wal --out merged.wal"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument("logs", nargs="+", metavar="LOG", help="a device's log file, or a merged log")
    m.add_argument("--out", required=True, metavar="FILE", help="the merged log to write (replaced atomically)")
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    m.set_defaults(run=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    from agent_saga.mesh import MeshError, merge

    try:
        result = merge(args.logs)
    except MeshError as err:
        raise CliError(f"{err}; nothing was written", EXIT_UNCHECKED) from None
    result.write(args.out)
    if args.json:
        print(json.dumps({**result.to_dict(), "out": args.out}, sort_keys=True))
    else:
        print(result.format_text())
        print(f"wrote {args.out}")
    return EXIT_OK if result.ok else EXIT_FINDING
