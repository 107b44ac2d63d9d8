"""`agent-saga ...` in process: ``main(argv)`` with its exit code and captured streams.

What a subprocess gave for free, checked instead: the call must leave the process as it found
it (environment, working directory, signal handlers, logging handlers, the kill switch's
process-wide state), so that one verb cannot change what the next test sees.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

from agent_saga.cli.main import main

__all__ = ["Ran", "run_cli"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


@dataclass(frozen=True)
class Ran:
    """What subprocess.run would have given: exit code and both streams."""

    returncode: int
    stdout: str
    stderr: str


def _process_state() -> dict[str, Any]:
    root = logging.getLogger()
    return {
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "signals": {s: signal.getsignal(s) for s in _SIGNALS},
        "logging": (list(root.handlers), root.level, logging.getLogger("agent_saga").handlers[:]),
        "switch": _switch_state(),
    }


def _switch_state() -> object:
    # The process-wide kill switch, breaker and limit store a verb could install (halt, resume):
    # a subprocess took them away at exit, an in-process call must not leave one behind.
    from agent_saga.gate import _breaker as breaker
    from agent_saga.gate import _stores as stores
    from agent_saga.gate import _switch as switch

    return (switch._explicit, switch._env, breaker._breaker, stores._store)


def run_cli(*args: str) -> Ran:
    """``agent-saga *args`` in this process, as subprocess.run(..., capture_output=True) gave it."""
    out, err = io.StringIO(), io.StringIO()
    before = _process_state()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's --help, --version and usage errors
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    after = _process_state()
    leaked = [k for k in before if before[k] != after[k]]
    assert not leaked, f"`agent-saga {' '.join(args)}` changed the process's {leaked}"
    return Ran(code, out.getvalue(), err.getvalue())
