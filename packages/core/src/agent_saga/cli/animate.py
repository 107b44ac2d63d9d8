"""``agent-saga animate``: one saga's run and unwind as a self-contained animated SVG."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent_saga.cli.main import EXIT_OK, EXIT_USAGE, CliError
from agent_saga.cli.options import add_log_option, log_target
from agent_saga.inert import inert

__all__ = ["register", "run_animate"]


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "animate",
        help="animate one saga's run and unwind as a self-contained SVG (no script, no network)",
        description=(
            "Draw one saga as an animated SVG: the forward steps build down, the compensations fire "
            "back up newest first, and a verdict banner closes it. CSS only: it renders in <img>, a "
            "GitHub comment or a PDF, and shows the final frame to viewers who asked for less motion. "
            "Without --saga, the first saga that did not complete is drawn (else the most recent one)."
        ),
        epilog=(
            "examples:\n  agent-saga animate --wal ./agent-saga.wal -o rollback.svg\n"
            "  agent-saga animate --wal ./prod.wal --saga a1b2c3 --theme light --no-loop -o incident.svg"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_option(p, "the log to read")
    p.add_argument("--saga", metavar="ID", help="the saga to draw (a unique prefix of its id is enough)")
    p.add_argument("--theme", choices=("light", "dark"), default="light", help="default: %(default)s")
    p.add_argument("--no-loop", action="store_true", help="play once and stay on the final frame")
    p.add_argument("-o", "--out", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(run=run_animate)


def run_animate(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import choose_saga, read_log, write_output
    from agent_saga.ui import THEMES, reconstruct, render_animation

    path = log_target(args)
    sagas = reconstruct(read_log(path))
    if args.saga:
        saga = choose_saga(sagas, args.saga, path)
    else:
        if not sagas:
            raise CliError(f"{path} holds no saga to animate", EXIT_USAGE)
        # The first saga that did not complete: where an incident (or the demo's Act I) starts;
        # later failures in the same log are often its consequences.
        unwound = [s for s in sagas if s.status != "completed"]
        saga = unwound[0] if unwound else sagas[-1]
        print(f"agent-saga animate: drawing saga {inert(saga.saga_id)} ({inert(saga.name or 'unnamed')}); "
              "choose another with --saga", file=sys.stderr)
    write_output(args.out, render_animation(saga, THEMES[args.theme], loop=not args.no_loop))
    return EXIT_OK
