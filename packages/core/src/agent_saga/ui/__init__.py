"""Pictures of a log and the flight recorder that serves them: ``graph``, ``animate``, ``viz``, ``ui``.

Every picture is drawn from one model of the log (``_model``, built on the recovery fold),
except the chain picture, which is drawn from the verifier (:mod:`agent_saga.audit`):
``to_dot`` / ``to_mermaid`` (a saga's graph), ``render_animation`` (its rollback as an
animated SVG), ``render_fleet`` (every saga of a log on elapsed time), ``render_chain``
(the hash chain, verified while drawn) and ``render_outcomes``.

The time-travel debugger (``agent-saga ui`` / ``python -m agent_saga.ui``) is a page served
by the standard library's HTTP server (no build step, nothing to install): the runs of a
log, filterable by status; each run's steps in LIFO order, coloured and labelled by
outcome; an inspector for a step's semantics, arguments and the exact compensation that
ran; a replay of the run from its first record to its verdict; live updates while the log
grows. A log is read through a :class:`RecordSource` (a file, or any log object).
"""

from agent_saga.ui._animate import render_animation
from agent_saga.ui._chain_picture import render_chain, render_chain_bytes
from agent_saga.ui._debugger import DEFAULT_HOST, DEFAULT_PORT, UiServer, make_server
from agent_saga.ui._follow import FileSource, Poll, RecordSource, WALSource
from agent_saga.ui._graph import to_dot, to_mermaid
from agent_saga.ui._model import GraphSaga, GraphStep, build, reconstruct
from agent_saga.ui._outcomes import render_outcomes
from agent_saga.ui._runs import RunStore
from agent_saga.ui._theme import THEMES
from agent_saga.ui._timeline import render_fleet

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "THEMES",
    "FileSource",
    "GraphSaga",
    "GraphStep",
    "Poll",
    "RecordSource",
    "RunStore",
    "UiServer",
    "WALSource",
    "build",
    "make_server",
    "reconstruct",
    "render_animation",
    "render_chain",
    "render_chain_bytes",
    "render_fleet",
    "render_outcomes",
    "to_dot",
    "to_mermaid",
]
