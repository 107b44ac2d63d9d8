"""``agent-saga-temporal demo``: a checkout scenario, run, exported, and replayed in the flight recorder.

One command for what otherwise takes three (run the example, ``export`` its history,
``agent-saga ui`` on the log): the scenario runs on ``$TEMPORAL_ADDRESS`` or on a dev
server it starts, its history is appended to a hash-chained log, and the core's flight
recorder serves that log on 127.0.0.1. The URL it prints opens the page on this run
and plays it from its first record ("Watch from start"); ``--open`` hands the URL to
the browser, and says so when there is none.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import webbrowser
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from urllib.parse import quote

__all__ = ["demo_log", "replay_url", "run_demo"]


def demo_log() -> Path:
    """Where the demo's runs are exported: ``demo.wal`` in the example's state directory."""
    from agent_saga_temporal.examples.ecommerce import steps

    return steps.state_dir() / "demo.wal"


def replay_url(server_url: str, saga_id: str) -> str:
    """The flight recorder's page, opened on ``saga_id`` and playing it from the start."""
    return f"{server_url}#run={quote(saga_id, safe='')}&watch=1"


def run_demo(
    scenario: str,
    *,
    wal_path: Path | None = None,
    port: int = 0,
    open_browser: bool = False,
    out: Callable[[str], None] = print,
) -> int:
    """Run ``scenario``, export it, serve the flight recorder on it until Ctrl+C or SIGTERM; 0 when stopped."""
    from agent_saga.ui import FileSource, make_server
    from agent_saga_temporal.examples.ecommerce.run import run_scenario

    # The scenarios fail activities on purpose; the timeline says what happened, without tracebacks.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    wal = wal_path or demo_log()
    wal.parent.mkdir(parents=True, exist_ok=True)
    run = asyncio.run(run_scenario(scenario, out=out, wal_path=wal))
    server = make_server(FileSource(wal), "127.0.0.1", port)
    with server:
        url = replay_url(server.url, run.saga_id)
        out(f"Flight recorder: {url}  (Ctrl+C stops it)")
        if open_browser and not webbrowser.open(url):
            out("No browser could be opened here: open the URL above in one.")
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a supervisor, a test) stops the server as Ctrl+C does; a BaseException leaves serve_forever.
    raise KeyboardInterrupt
