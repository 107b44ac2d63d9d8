"""The time-travel debugger and flight recorder: ``agent-saga ui`` / ``python -m agent_saga.ui``.

A page served by the standard library's HTTP server (no build step, nothing to
install): the runs of a log, filterable by status; each run's steps in LIFO order,
coloured and labelled by outcome; an inspector for a step's semantics, arguments and
the exact compensation that ran; a replay of the run from its first record to its
verdict; live updates while the log grows.
"""

from agent_saga.ui.runs import RunStore
from agent_saga.ui.server import DEFAULT_HOST, DEFAULT_PORT, UiServer, make_server
from agent_saga.ui.source import FileSource, Poll, RecordSource, WALSource

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FileSource",
    "Poll",
    "RecordSource",
    "RunStore",
    "UiServer",
    "WALSource",
    "make_server",
]
