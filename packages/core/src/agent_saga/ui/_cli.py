"""The ui wing's verbs: ``agent-saga ui`` (the time-travel debugger), ``graph``, ``animate``, ``viz``.

Each reads one log (``--wal-path``); the pictures are written to ``--out`` or standard output.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_log_option, add_out_option, add_verb, log_target
from agent_saga.inert import inert

if TYPE_CHECKING:
    from agent_saga.ui._model import GraphSaga

__all__ = ["TOKEN_ENV", "register", "run_animate", "run_graph", "run_ui", "run_viz"]

TOKEN_ENV = "AGENT_SAGA_UI_TOKEN"


def register(verbs: Any) -> None:
    _register_ui(verbs)
    _register_graph(verbs)
    _register_animate(verbs)
    _register_viz(verbs)


def _register_ui(verbs: Any) -> None:
    p = add_verb(
        verbs, "ui", run_ui,
        about=(
            "Serve a page that lists the runs of a log, shows each run's steps newest-first by outcome, "
            "inspects a step's arguments and the compensation that ran, replays a run from its start, "
            "and follows the log as it grows. Binds 127.0.0.1; any other address needs a bearer token."
        ),
        examples=(
            "examples:\n  agent-saga ui --wal-path ./agent-saga.wal --port 8080\n"
            "  python -m agent_saga.ui --wal-path ./agent-saga.wal\n"
            f"  {TOKEN_ENV}=$(openssl rand -hex 24) agent-saga ui --wal-path ./prod.wal --host 0.0.0.0"
        ),
    )
    add_log_option(p, "the log to show")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--token", help=f"require this bearer token for the API (better: ${TOKEN_ENV}, which "
                                   "other users cannot read from the process list)")


def run_ui(args: argparse.Namespace) -> int:
    from agent_saga.cli.serve import serve_until_stopped
    from agent_saga.errors import ConfigurationError, SagaError
    from agent_saga.log.resolve import open_log
    from agent_saga.ui import FileSource, RecordSource, WALSource, make_server

    path = log_target(args)
    source: RecordSource
    if isinstance(path, Path):
        source = FileSource(path)
    else:  # a server log, followed live as the file log is
        try:
            source = WALSource(open_log(path, create=False))
        except (ConfigurationError, SagaError) as err:
            raise CliError(f"cannot read {path}: {err}", EXIT_UNCHECKED) from None
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port} is not a port number (0..65535)", EXIT_USAGE)
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    try:
        server = make_server(source, args.host, args.port, token)
    except ValueError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except SagaError as err:  # a line that is not a record, an encrypted log with the wrong key
        raise CliError(f"cannot read {path}: {err}", EXIT_UNCHECKED) from None
    with server:
        where = server.url + (f"#token={token}" if token else "")
        print(f"agent-saga ui: {path} at {where}  (Ctrl+C stops it)", flush=True)
        serve_until_stopped(server)
    return EXIT_OK


def _picture_options(p: argparse.ArgumentParser, saga: str | None = None, *, themed: bool = False) -> None:
    """What every picture verb takes: the log; ``--saga`` (``saga`` says which) and ``--theme``."""
    add_log_option(p, "the log to read")
    if saga is not None:
        p.add_argument("--saga", metavar="ID", help=f"{saga} (a unique prefix of its id is enough)")
    if themed:
        p.add_argument("--theme", choices=("light", "dark"), default="light", help="default: %(default)s")


def _register_graph(verbs: Any) -> None:
    p = add_verb(
        verbs, "graph", run_graph,
        about=(
            "Draw the shape of each saga in a log: its steps, and the rollback fork where compensated, "
            "COMPENSATION FAILED and ORPHANED are three visibly different outcomes."
        ),
        examples=(
            "examples:\n  agent-saga graph --wal ./agent-saga.wal > sagas.mmd\n"
            "  agent-saga graph --wal ./agent-saga.wal --format dot | dot -Tpng -o saga.png"
        ),
    )
    _picture_options(p, "only this saga")
    p.add_argument("--format", choices=("mermaid", "dot"), default="mermaid", help="default: %(default)s")
    add_out_option(p)


def run_graph(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import read_log, write_output
    from agent_saga.ui import reconstruct, to_dot, to_mermaid

    path = log_target(args)
    sagas = reconstruct(read_log(path))
    if args.saga:
        sagas = [choose_saga(sagas, args.saga, path)]
    write_output(args.out, to_dot(sagas) if args.format == "dot" else to_mermaid(sagas))
    return EXIT_OK


def _register_animate(verbs: Any) -> None:
    p = add_verb(
        verbs, "animate", run_animate,
        about=(
            "Draw one saga as an animated SVG: the forward steps build down, the compensations fire "
            "back up newest first, and a verdict banner closes it. CSS only: it renders in <img>, a "
            "GitHub comment or a PDF, and shows the final frame to viewers who asked for less motion. "
            "Without --saga, the first saga that did not complete is drawn (else the most recent one)."
        ),
        examples=(
            "examples:\n  agent-saga animate --wal ./agent-saga.wal -o rollback.svg\n"
            "  agent-saga animate --wal ./prod.wal --saga a1b2c3 --theme light --no-loop -o incident.svg"
        ),
    )
    _picture_options(p, "the saga to draw", themed=True)
    p.add_argument("--no-loop", action="store_true", help="play once and stay on the final frame")
    add_out_option(p)


def run_animate(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import read_log, write_output
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


def _register_viz(verbs: Any) -> None:
    p = add_verb(
        verbs, "viz", run_viz,
        about=(
            "fleet: every saga as a bar on real elapsed time, unwinds striped as well as coloured. "
            "chain: the hash chain verified while drawing; a bad link is red and labelled BROKEN, and "
            "cropping keeps every break (exit 1 when the chain is broken, as 'verify'). outcomes: "
            "tool x outcome; tools seen fewer than five times show greyed raw counts."
        ),
        examples=(
            "examples:\n  agent-saga viz --wal ./prod.wal --kind fleet    -o fleet.svg\n"
            "  agent-saga viz --wal ./prod.wal --kind chain    -o chain.svg\n"
            "  agent-saga viz --wal ./prod.wal --kind outcomes -o outcomes.svg"
        ),
    )
    p.add_argument("--kind", required=True, choices=("fleet", "chain", "outcomes"), help="which picture")
    _picture_options(p, themed=True)
    add_out_option(p)


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


def choose_saga(sagas: Sequence[GraphSaga], prefix: str, where: Path | str) -> GraphSaga:
    """The one saga ``prefix`` names in the log ``where`` (the same rule as every verb that takes a saga id)."""
    from agent_saga.cli.sagaids import pick_saga_id

    chosen = pick_saga_id(prefix, (s.saga_id for s in sagas), str(where))
    return next(s for s in sagas if s.saga_id == chosen)
