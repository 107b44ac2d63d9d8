"""``agent-saga signal SAGA NAME --data JSON``: send a named event to a durable run.

A thin front over :func:`agent_saga.signal` (``recovery/signals.py``): the run's
``wait_for_event(NAME)`` takes it, now or when the run is resumed. Exit codes: 0 sent;
1 refused (the saga ended, is being unwound, is not a durable run, or the log does not
verify); 2 usage (data that is not JSON, an unknown or ambiguous saga id); 3 the log could
not be read or written.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_log_option, add_verb, log_target
from agent_saga.inert import inert

__all__ = ["register"]


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "signal", _run,
        about="Write an EVENT_SIGNALLED record to the saga's log. The run's wait_for_event(NAME) "
        "takes the oldest signal of that name no earlier wait took: one sent before the wait began, or "
        "while the run's process was dead, counts. A signal is data for the run, never an approval.",
        examples="exit codes: 0 sent, 1 refused (ended, unwinding, not a durable run, a log that does not "
        "verify), 2 usage (data not JSON, unknown saga id), 3 could not read or write the log\n"
        "example: agent-saga signal 2e78f498 approved --data '{\"by\": \"ops\"}' --wal-path agent-saga.wal",
    )
    p.add_argument("saga_id", metavar="SAGA", help="the run's saga id (or the start of it)")
    p.add_argument("name", metavar="NAME", help="the event's name, as the run waits for it")
    p.add_argument("--data", default="null", metavar="JSON", help="the event's data, as JSON (default: null)")
    add_log_option(p, "the run's log")


def _run(args: argparse.Namespace) -> int:
    from agent_saga.cli.sagaids import resolve_saga_id
    from agent_saga.errors import SignalRefused, WALError
    from agent_saga.recovery.signals import signal

    try:
        data = json.loads(args.data, parse_constant=_not_json)
    except ValueError as err:
        raise CliError(f"--data is not JSON ({err}): quote it for the shell, e.g. --data '{{\"ok\": true}}'",
                       EXIT_USAGE) from None
    target = log_target(args)
    saga_id = resolve_saga_id(args.saga_id, target)
    try:
        signal(saga_id, args.name, data, wal=str(target))
    except SignalRefused as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except (OSError, WALError) as err:
        raise CliError(f"could not write the signal to {target}: {err}", EXIT_UNCHECKED) from None
    print(f"signalled {inert(args.name)} to saga {saga_id} in {target}")
    return EXIT_OK


def _not_json(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number")
