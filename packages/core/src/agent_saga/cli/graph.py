"""``agent-saga graph``: each saga of a log, with the fork where it unwound."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_OK, EXIT_UNCHECKED, CliError
from agent_saga.cli.sagaids import pick_saga_id

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
    p.add_argument("--wal", "--wal-path", dest="wal", required=True, metavar="PATH", help="the log to read")
    p.add_argument("--saga", metavar="ID", help="only this saga (a unique prefix of its id is enough)")
    p.add_argument("--format", choices=("mermaid", "dot"), default="mermaid", help="default: %(default)s")
    p.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(run=run_graph)


def run_graph(args: argparse.Namespace) -> int:
    from agent_saga.errors import WALCorrupt
    from agent_saga.log import read_records
    from agent_saga.recovery.fold import fold
    from agent_saga.viz.graph import build, to_dot, to_mermaid

    path = Path(args.wal)
    try:
        records = list(read_records(path))
    except FileNotFoundError:
        raise CliError(f"no log at {path} (check --wal)", EXIT_UNCHECKED) from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a log file (check --wal)", EXIT_UNCHECKED) from None
    except (PermissionError, WALCorrupt, UnicodeDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}", EXIT_UNCHECKED) from None
    causes = {r["saga"]: str(r.get("body", {}).get("cause", "")) for r in records
              if r.get("type") == "ROLLBACK_STARTED" and isinstance(r.get("body"), dict)}
    sagas = build(fold(records).values(), causes)
    if args.saga:
        chosen = pick_saga_id(args.saga, (s.saga_id for s in sagas), str(path))
        sagas = [s for s in sagas if s.saga_id == chosen]
    text = to_dot(sagas) if args.format == "dot" else to_mermaid(sagas)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK
