"""``agent-saga repair``: continue a dead or quarantined saga, or hand it back to recovery.

Without ``--resume`` or ``--abandon`` it prints the plan (what is kept, what failed, what
blocks a repair) and records nothing. ``--resume MODULE:FUNC`` imports the operator's
continuation (the operator typed that name; no module name is ever taken from the log).
Exit codes: 0 done (or a plan with no blockers); 1 the saga cannot be repaired (the reason
printed), or the continuation failed and the whole transaction was rolled back; 2 a usage
error; 3 the log could not be read or written. ``--resume`` and ``--abandon`` sign every
record with the operator's key (``--operator-key``, default ``$AGENT_SAGA_OPERATOR_KEY``),
one the host trusts; printing the plan needs none. See docs/REPAIR.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import (
    add_imports_option,
    add_log_option,
    add_reason_options,
    add_verb,
    import_modules,
    log_target,
)
from agent_saga.inert import inert

__all__ = ["OPERATOR_KEY_ENV", "add_operator_options", "operator_key", "register"]

#: Where ``--operator-key`` is read from when it is not given.
OPERATOR_KEY_ENV = "AGENT_SAGA_OPERATOR_KEY"


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "repair", _run,
        about=(
            "Repair one saga whose process died or that was quarantined: keep what it did, record the "
            "operator's amendments, and run a continuation in a new saga that can still undo everything; "
            "or abandon the repair so the recovery daemon unwinds it. With neither, print the plan."
        ),
        examples=(
            "exit codes: 0 done (or a plan with no blockers), 1 cannot be repaired or the continuation "
            "failed (rolled back), 2 usage error, 3 could not read or write the log\n"
            "example:\n  agent-saga repair 2e78f498 --operator ops@example.com --operator-key ~/.ops.key "
            "--reason 'bad postcode' --amend postcode='SW1A 1AA' --resume myapp.repairs:onboard"
        ),
    )
    p.add_argument("saga_id", metavar="SAGA", help="the saga to repair (its id, or the start of it)")
    p.add_argument("--amend", action="append", default=[], metavar="FIELD=VALUE",
                   help="a corrected value, as a string; FIELD:=JSON for a number, list, ... (repeatable)")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--resume", metavar="MODULE:FUNC",
                     help="run this async function (saga, amendments) as the continuation")
    end.add_argument("--abandon", action="store_true", help="end the repair: the recovery daemon unwinds the saga")
    p.add_argument("--lease-grace", type=float, default=5.0, metavar="SECONDS",
                   help="a lease counts as held until this long after it runs out, as for the daemon (default 5)")
    add_operator_options(p, "the repair", "@compensator handlers",
                         note="; a repair record without a trusted signature is not a repair")


def add_operator_options(p: argparse.ArgumentParser, signs: str, imports: str, *, note: str = "") -> None:
    """What an operator's signed change to a saga's log takes: who and why, the key that signs
    ``signs`` (``note`` ends its help), the modules that register ``imports``, and the log."""
    add_reason_options(p, "--operator")
    p.add_argument("--operator-key", default=None, metavar="FILE",
                   help=f"the operator key that signs {signs}, one the host trusts (default: ${OPERATOR_KEY_ENV}){note}")
    add_imports_option(p, imports)
    add_log_option(p, "the saga's log")


def operator_key(args: argparse.Namespace) -> str | None:
    """The ``--operator-key`` file, else ``$AGENT_SAGA_OPERATOR_KEY``; None when neither is given."""
    return args.operator_key or os.environ.get(OPERATOR_KEY_ENV) or None


def amendments(words: list[str]) -> dict[str, Any]:
    """``FIELD=text`` (a string as typed) and ``FIELD:=json``; a usage error naming a bad one."""
    fields: dict[str, Any] = {}
    for word in words:
        name, sep, value = word.partition("=")
        as_json = name.endswith(":")
        name = name.removesuffix(":")
        if not sep or not name.isidentifier():
            raise CliError(f"--amend {word!r}: give FIELD=VALUE (or FIELD:=JSON), FIELD a plain name", EXIT_USAGE)
        if as_json:
            try:
                fields[name] = json.loads(value)
            except ValueError as err:
                raise CliError(f"--amend {word!r}: the value after ':=' is not JSON ({err})", EXIT_USAGE) from None
        else:
            fields[name] = value
    return fields


def continuation(ref: str) -> Any:
    """The async function ``MODULE:FUNC`` names (imported because the operator typed it)."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise CliError(f"--resume {ref!r}: give MODULE:FUNC, e.g. myapp.repairs:onboard", EXIT_USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception as err:  # noqa: BLE001 - whatever failed, the operator's to fix, in one line
        raise CliError(f"--resume {ref!r}: cannot load it ({type(err).__name__}: {err})", EXIT_USAGE) from None
    if not inspect.iscoroutinefunction(fn):
        raise CliError(f"--resume {ref!r} is not an async function (async def f(saga, amendments))", EXIT_USAGE)
    return fn


def _run(args: argparse.Namespace) -> int:
    from agent_saga.cli.sagaids import resolve_saga_id
    from agent_saga.engine.report import SagaAborted
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.log.resolve import open_log
    from agent_saga.recovery.repair import RepairRefused, RepairSession

    fields = amendments(args.amend)
    if args.lease_grace < 0:
        raise CliError(f"--lease-grace must be >= 0 seconds, got {args.lease_grace}", EXIT_USAGE)
    if fields and not args.resume:
        raise CliError("--amend goes with --resume: amendments are what the continuation runs with", EXIT_USAGE)
    fn = continuation(args.resume) if args.resume else None
    key = operator_key(args)
    if (fn is not None or args.abandon) and key is None:
        raise CliError(
            f"--resume and --abandon are signed by an operator key the host trusts: give --operator-key FILE "
            f"(or set ${OPERATOR_KEY_ENV}); 'agent-saga approvals keygen --approver ops@example --key FILE' makes one",
            EXIT_USAGE,
        )
    import_modules(args.imports, "@compensator handlers")
    target = log_target(args)
    saga_id = resolve_saga_id(args.saga_id, target)
    log = os.fspath(target)
    try:
        if fn is None and not args.abandon:
            plan = RepairSession.plan(log, saga_id, lease_grace=args.lease_grace)
            print(plan.format_text())
            return EXIT_FINDING if plan.blockers else EXIT_OK
        session = RepairSession.open(log, saga_id, operator=args.operator, reason=args.reason,
                                     signer=key,
                                     lease_grace=args.lease_grace)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except RepairRefused as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except WALError as err:
        raise CliError(f"cannot read {log}: {err}", EXIT_UNCHECKED) from None
    with session:
        if args.abandon:
            session.abandon(reason=args.reason)
            print(f"abandoned: saga {inert(saga_id)} is handed back; the recovery daemon unwinds it")
            return EXIT_OK
        assert fn is not None  # not --abandon: --resume, checked above
        session.amend(**fields)
        print(session.format_text())
        wal = open_log(log)
        try:
            result = asyncio.run(session.resume(fn, wal=wal))
        except SagaAborted as err:
            print(f"the continuation failed; saga {inert(session.continued_as or '?')} rolled back the whole "
                  f"transaction ({'clean' if err.report.clean else 'NOT clean'}): {inert(err.report.cause)}")
            return EXIT_FINDING
        finally:
            wal.close()
    print(f"resumed as saga {inert(session.continued_as or '?')}: {inert(repr(result))}")
    return EXIT_OK
