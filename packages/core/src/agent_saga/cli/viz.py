"""``agent-saga viz``: pictures of a whole log (fleet, chain, outcomes)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, CliError
from agent_saga.cli.options import add_log_option, log_target

__all__ = ["register", "run_viz"]


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "viz",
        help="draw a whole log as SVG: every saga on a timeline, the hash chain, or tool x outcome",
        description=(
            "fleet: every saga as a bar on real elapsed time, unwinds striped as well as coloured. "
            "chain: the hash chain verified while drawing; a bad link is red and labelled BROKEN, and "
            "cropping keeps every break (exit 1 when the chain is broken, as 'verify'). outcomes: "
            "tool x outcome; tools seen fewer than five times show greyed raw counts."
        ),
        epilog=(
            "examples:\n  agent-saga viz --wal ./prod.wal --kind fleet    -o fleet.svg\n"
            "  agent-saga viz --wal ./prod.wal --kind chain    -o chain.svg\n"
            "  agent-saga viz --wal ./prod.wal --kind outcomes -o outcomes.svg"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_option(p, "the log to read")
    p.add_argument("--kind", required=True, choices=("fleet", "chain", "outcomes"), help="which picture")
    p.add_argument("--theme", choices=("light", "dark"), default="light", help="default: %(default)s")
    p.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(run=run_viz)


def run_viz(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import read_log, write_output
    from agent_saga.ui import THEMES

    path = log_target(args)
    theme = THEMES[args.theme]
    if args.kind == "chain":
        from agent_saga.cli.options import readable_log
        from agent_saga.ui import render_chain
        from agent_saga.ui._chain_picture import read_entries, verify_entries

        # Raw bytes, not decoded records: a line that is not a record is drawn BROKEN, not refused.
        with readable_log(path) as copy:
            if copy.is_dir():
                raise CliError(f"{path} is a directory, not a log file (check --wal)", EXIT_UNCHECKED)
            try:
                data = copy.read_bytes()
            except FileNotFoundError:
                raise CliError(f"no log at {path} (check --wal)", EXIT_UNCHECKED) from None
        entries, notes = read_entries(data)
        report = verify_entries(entries, notes)
        write_output(args.out, render_chain(entries, report, theme))
        if report.status == "broken":
            print(f"agent-saga viz: chain {report.label}", file=sys.stderr)
            return EXIT_FINDING
        return EXIT_OK

    from agent_saga.ui import reconstruct, render_fleet, render_outcomes

    sagas = reconstruct(read_log(path))
    write_output(args.out, (render_fleet if args.kind == "fleet" else render_outcomes)(sagas, theme))
    return EXIT_OK
