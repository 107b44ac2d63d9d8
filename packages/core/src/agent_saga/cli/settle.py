"""``agent-saga settle``: a person says what became of a step nobody could tell about (``resume-unknown``).

Exit codes: 0 settled (the next sweep, or ``agent-saga recover``, resumes the run); 1 refused
(no such pending escalation, settled already, or the saga is busy); 2 usage error; 3 could not
read or write the log.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_verb, import_modules, log_target
from agent_saga.cli.repair import OPERATOR_KEY_ENV, add_operator_options, operator_key
from agent_saga.inert import inert

__all__ = ["register"]


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "settle", _run,
        about=(
            "A resumed run whose step was in flight at the crash, and that no reconciler could settle, "
            "waits for a person (escalation kind resume-unknown). Check the provider, then say it landed "
            "(with the result the tool returned, as JSON: the resume serves it) or it did not (the resume "
            "runs the call again). Signed by an operator key the host trusts; the escalation is answered."
        ),
        examples=(
            "example:\n  agent-saga settle 3f2a9c01d4e5 --landed --result '{\"ref\": \"R-rome\"}' "
            "--operator ops@example.com --operator-key ~/.ops.key --reason 'found in the booking console'"
        ),
    )
    p.add_argument("escalation", metavar="ESCALATION", help="the escalation's id (agent-saga escalations lists it)")
    found = p.add_mutually_exclusive_group(required=True)
    found.add_argument("--landed", action="store_true", help="the effect happened (give --result)")
    found.add_argument("--not-landed", action="store_true", help="the effect did not happen")
    p.add_argument("--result", metavar="JSON", help="with --landed: what the tool returned, as JSON")
    add_operator_options(p, "it", "@inverse_of recipes")


def _result(args: argparse.Namespace) -> Any:
    if args.not_landed:
        if args.result is not None:
            raise CliError("--result goes with --landed: a step that did not land returned nothing", EXIT_USAGE)
        return None
    if args.result is None:
        raise CliError("--landed needs --result JSON: what the tool returned (the resume serves it)", EXIT_USAGE)
    try:
        return json.loads(args.result)
    except ValueError as err:
        raise CliError(f"--result is not JSON ({err})", EXIT_USAGE) from None


def _run(args: argparse.Namespace) -> int:
    from agent_saga.errors import ConfigurationError, ResumeRefused, WALError
    from agent_saga.recovery.settle import settle

    result = _result(args)
    key = operator_key(args)
    if key is None:
        raise CliError(f"a settle is signed by an operator key the host trusts: give --operator-key FILE (or set "
                       f"${OPERATOR_KEY_ENV})", EXIT_USAGE)
    import_modules(args.imports, "@inverse_of recipes")
    target = log_target(args)
    try:
        answered = settle(args.escalation, landed=args.landed, result=result, operator=args.operator,
                          reason=args.reason, signer=key, wal=os.fspath(target))
    except (ConfigurationError, ValueError) as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except ResumeRefused as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except (OSError, WALError) as err:
        raise CliError(f"could not settle it in {target}: {err}", EXIT_UNCHECKED) from None
    print(f"settled {inert(answered.id)}: step {answered.step} of saga {inert(answered.saga)} "
          f"{'landed' if args.landed else 'did not land'}; the next sweep resumes the run")
    return EXIT_OK
