"""``agent-saga graph``: each saga of a log, with the fork where it unwound."""

from __future__ import annotations

import argparse
from typing import Any

from agent_saga.cli.main import EXIT_OK
from agent_saga.cli.options import add_log_option, log_target

__all__ = ["register", "run_graph"]


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "graph",
        help="draw each saga of a log and how it unwound (Mermaid or Graphviz DOT)",
        description=(
            "Draw the shape of each saga in a log: its steps, and the rollback fork where compensated, "
            "COMPENSATION FAILED and ORPHANED are three visibly different outcomes."
        ),
        epilog=(
            "examples:\n  agent-saga graph --wal ./agent-saga.wal > sagas.mmd\n"
            "  agent-saga graph --wal ./agent-saga.wal --format dot | dot -Tpng -o saga.png"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_option(p, "the log to read")
    p.add_argument("--saga", metavar="ID", help="only this saga (a unique prefix of its id is enough)")
    p.add_argument("--format", choices=("mermaid", "dot"), default="mermaid", help="default: %(default)s")
    p.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(run=run_graph)


def run_graph(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import choose_saga, read_log, write_output
    from agent_saga.ui import reconstruct, to_dot, to_mermaid

    path = log_target(args)
    sagas = reconstruct(read_log(path))
    if args.saga:
        sagas = [choose_saga(sagas, args.saga, path)]
    write_output(args.out, to_dot(sagas) if args.format == "dot" else to_mermaid(sagas))
    return EXIT_OK
