"""``agent-saga ui``: serve the time-travel debugger for one log."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_log_option, log_target

__all__ = ["TOKEN_ENV", "register", "run_ui", "serve_until_stopped"]

TOKEN_ENV = "AGENT_SAGA_UI_TOKEN"


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "ui",
        help="serve the time-travel debugger for a log (127.0.0.1 by default)",
        description=(
            "Serve a page that lists the runs of a log, shows each run's steps newest-first by outcome, "
            "inspects a step's arguments and the compensation that ran, replays a run from its start, "
            "and follows the log as it grows. Binds 127.0.0.1; any other address needs a bearer token."
        ),
        epilog=(
            "examples:\n  agent-saga ui --wal-path ./agent-saga.wal --port 8080\n"
            "  python -m agent_saga.ui --wal-path ./agent-saga.wal\n"
            f"  {TOKEN_ENV}=$(openssl rand -hex 24) agent-saga ui --wal-path ./prod.wal --host 0.0.0.0"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_option(p, "the log to show")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--token", help=f"require this bearer token for the API (better: ${TOKEN_ENV}, which "
                                   "other users cannot read from the process list)")
    p.set_defaults(run=run_ui)


def run_ui(args: argparse.Namespace) -> int:
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


def serve_until_stopped(server: Any) -> None:
    """``server.serve_forever()`` until Ctrl+C or SIGTERM (both end it cleanly)."""
    with _StoppedBySigterm():
        try:
            server.serve_forever()
        except (KeyboardInterrupt, _Terminated):
            pass


class _Terminated(BaseException):
    """SIGTERM arrived: leave serve_forever as Ctrl+C does.

    A BaseException, like KeyboardInterrupt: arriving while a request is being accepted, an
    Exception would be swallowed by socketserver's handle_error and the server would go on.
    """


class _StoppedBySigterm:
    """SIGTERM stops the server as cleanly as SIGINT (exit 0, socket closed).

    A supervisor (systemd, docker stop, a test harness) sends SIGTERM, and a process started from a
    background shell inherits SIGINT ignored, so Ctrl+C alone would leave it running. The handler
    raises in the main thread, out of serve_forever's select; shutdown() cannot be used there, it
    waits for the loop it would be called from.
    """

    def __enter__(self) -> None:
        self._previous: Any = None
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            self._previous = signal.signal(signal.SIGTERM, _raise_terminated)

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated
