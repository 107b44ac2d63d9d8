"""``agent-saga approvals list | approve | deny | break-glass``: answer a waiting agent from a shell.

The requests live in ``--store``: a directory or a ``redis://`` URL (default
``$AGENT_SAGA_APPROVALS``, else ``$AGENT_SAGA_HOME/approvals``, else
``~/.agent-saga/approvals``). A decision goes into the store, where the waiting
saga sees it on its next poll; with ``--wal-path`` (default ``$AGENT_SAGA_WAL``)
it is also written to that log here and now.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError

__all__ = ["register"]

_STORE_HELP = (
    "where the requests live: a directory or a redis:// URL (default: $AGENT_SAGA_APPROVALS, "
    "else $AGENT_SAGA_HOME/approvals, else ~/.agent-saga/approvals)"
)
_EXAMPLES = (
    "examples:\n"
    "  agent-saga approvals list\n"
    "  agent-saga approvals approve af83c011 --approver risk@corp --note 'verified by phone'\n"
    "  agent-saga approvals deny af83c011 --approver risk@corp --note 'not a customer we know'\n"
    "  agent-saga approvals break-glass af83c011 --approver cto@corp --note 'payroll deadline, approver unreachable'"
)


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help=_STORE_HELP)


def register(verbs: Any) -> None:
    group = verbs.add_parser(
        "approvals",
        help="list the requests waiting for a human, and approve, deny or break-glass them",
        description="Requests an ApprovalGateway is waiting on. A decision lands in the store, where the "
        "waiting saga observes it; every decision names its approver.",
        epilog=_EXAMPLES + "\n\nexit codes: 0 ok; 1 something is pending (list) or the request could not be "
        "decided (already decided, expired); 2 usage (no --approver, unknown id); 3 the store could not be used",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Nested parsers inherit the group's class, so usage errors exit 2 like every verb.
    actions = group.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser(
        "list",
        help="show waiting requests (exit 1 if any)",
        description="Show each pending request: tool, rule and reason, age, id, and the step's arguments.",
        epilog="example:\n  agent-saga approvals list --store redis://approvals.internal:6379/0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--all", action="store_true", help="include decided and expired requests")
    _store_arg(listing)
    listing.set_defaults(run=_run_list)

    for name, verdict, text in (
        ("approve", "approve", "let the step run"),
        ("deny", "deny", "refuse the step"),
        ("break-glass", "break-glass", "emergency grant, recorded apart and flagged for review"),
    ):
        p = actions.add_parser(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. ID is the id shown by 'approvals list' (a unique prefix "
            "is enough). --approver is required: the log must name who decided.",
            epilog=f"example:\n  agent-saga approvals {name} af83c011 --approver risk@corp --note 'verified by phone'",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("request", metavar="ID", help="the request id, or a unique prefix of it")
        p.add_argument("--approver", default=None, help="who decides (recorded in the store and the log)")
        p.add_argument("--note", default="", help="why (recorded; required for break-glass)")
        _store_arg(p)
        p.add_argument(
            "--wal-path", default=None,
            help="also write the decision to this log now (default: $AGENT_SAGA_WAL; without either, the "
            "waiting agent writes it into its own log when it sees it)",
        )
        p.set_defaults(run=_run_decide, verdict=verdict)


def _open_store(args: argparse.Namespace) -> Any:
    from agent_saga.approvals.store import open_store
    from agent_saga.errors import ConfigurationError

    try:
        return open_store(args.store)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _run_list(args: argparse.Namespace) -> int:
    from agent_saga.approvals.entry import short_ids
    from agent_saga.gate.stores import StoreUnavailable

    store = _open_store(args)
    try:
        entries = store.entries()
    except StoreUnavailable as err:
        raise CliError(f"could not read the approval store: {err}", EXIT_UNCHECKED) from None
    now = time.time()
    shown = short_ids([e.id for e in entries])
    pending = [e for e in entries if not e.decided and now < e.deadline]
    listed = sorted(entries if args.all else pending, key=lambda e: e.created_at)
    print(f"approvals: {store.location} ({len(pending)} pending)")
    for e in listed:
        status = e.status.value if e.decided or now < e.deadline else "EXPIRED"
        print(f"  [{status}] {e.tool} -- {e.reason} (rule {e.rule}, {_age(now - e.created_at)} old, id {shown[e.id]})")
        if e.decided:
            who = e.approver or "agent-saga"
            print(f"        {who}: {e.note}" if e.note else f"        {who}")
        else:
            asked = [t for i in sorted(e.notified) if i < len(e.levels) for t in e.levels[i][0]]
            print(f"        saga {e.saga_id}, step {e.step}; expires in {_age(e.deadline - now)}; "
                  f"asked: {', '.join(asked) or 'nobody yet'}")
        for k in sorted(e.args):
            print(f"        {k}: {_value(e.args[k])}")
    return EXIT_FINDING if pending else EXIT_OK


def _run_decide(args: argparse.Namespace) -> int:
    from agent_saga.approvals.decide import ANONYMOUS, decide
    from agent_saga.approvals.errors import ApprovalNotFound, ApprovalNotPending
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.gate.stores import StoreUnavailable

    if not (args.approver or "").strip():
        raise CliError(f"refused: {ANONYMOUS}", EXIT_USAGE)
    if args.verdict == "break-glass" and not args.note.strip():
        raise CliError("break-glass needs --note saying why the normal approval could not wait", EXIT_USAGE)
    store = _open_store(args)
    wal = None
    path = args.wal_path or os.environ.get("AGENT_SAGA_WAL") or None
    if path:
        from agent_saga.log.resolve import open_log

        try:
            wal = open_log(path)
        except (OSError, WALError, ValueError) as err:
            raise CliError(f"cannot open the log {path}: {err}", EXIT_UNCHECKED) from None
    try:
        entry = decide(store, args.request, args.verdict, approver=args.approver, note=args.note, wal=wal, via="cli")
    except ApprovalNotFound as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except ApprovalNotPending as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except StoreUnavailable as err:
        raise CliError(f"could not use the approval store: {err}", EXIT_UNCHECKED) from None
    except WALError as err:
        raise CliError(f"decided in the store, but the log could not be written: {err}", EXIT_UNCHECKED) from None
    finally:
        if wal is not None:
            wal.close()
    done = {"approve": "approved", "deny": "denied", "break-glass": "granted by BREAK-GLASS (flagged for review)"}
    where = f"; logged to {wal.location}" if wal is not None else ""
    print(f"{done[args.verdict]}: {entry.tool} (saga {entry.saga_id}, step {entry.step}, id {entry.id[:8]}) "
          f"by {entry.approver}{where}")
    return EXIT_OK
