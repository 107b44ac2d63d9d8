"""``agent-saga halt | drain | quarantine | resume | status | init-host``: the kill switch, from a shell.

The switch lives in ``--store``: a file path or a ``redis://`` URL (default
``$AGENT_SAGA_SWITCH``, else the host's ``/var/lib/agent-saga/switch.json``).
Every change is also written, with who and why, to a log: the one ``--wal-path``
names (created if need be), else ``$AGENT_SAGA_WAL`` or ``./agent-saga.wal`` if
that exists -- a default log is never created unasked; the command says when a
change was not logged. A saga id may be given as the prefix ``graph`` prints; it
is resolved against that log.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import (
    add_log_option,
    add_reason_options,
    add_verb,
    default_log,
    open_log_to_write,
)
from agent_saga.cli.sagaids import resolve_saga_id
from agent_saga.inert import inert

__all__ = ["register"]

_STORE_HELP = (
    "where the switch lives: a file path or a redis:// URL "
    "(default: $AGENT_SAGA_SWITCH, else the host's /var/lib/agent-saga/switch.json)"
)


def _common(p: argparse.ArgumentParser, log: bool = True) -> None:
    p.add_argument("--store", default=None, help=_STORE_HELP)
    if log:
        add_log_option(p, "the log that records the change, created if missing; saga ids are resolved against it",
                       optional=True)


def register(verbs: Any) -> None:
    halt = add_verb(
        verbs, "halt", _run_halt,
        about=(
            "Refuse new side effects in a scope until the TTL runs out or someone resumes it. "
            "With --drain: start no new sagas, let running ones finish."
        ),
        examples=(
            "examples:\n  agent-saga halt --scope tool:wire.send --reason 'fraud pattern' --by soc@corp\n"
            "  agent-saga halt --drain --reason deploying --by ci@corp --ttl 600"
        ),
    )
    halt.add_argument("--scope", help="global | tool:NAME | tool:prefix.* | tag:NAME")
    halt.add_argument("--drain", action="store_true", help="drain instead: no new sagas, running ones finish")
    add_reason_options(halt)
    halt.add_argument("--ttl", type=float, default=None, help="seconds until it lifts by itself (default 3600)")
    _common(halt)

    drain = verbs.add_parser(
        "drain",
        description="Refuse new sagas until the TTL runs out or someone resumes; running sagas finish.",
        epilog="example:\n  agent-saga drain --reason deploying --by ci@corp --ttl 600",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reason_options(drain)
    drain.add_argument("--ttl", type=float, default=None, help="seconds until it lifts by itself (default 3600)")
    _common(drain)
    drain.set_defaults(run=_run_halt, drain=True, scope=None)

    quarantine = add_verb(
        verbs, "quarantine", _run_quarantine,
        about="Freeze one saga. It is not rolled back, and the recovery daemon skips it; a human decides.",
        examples="example:\n  agent-saga quarantine saga-8f3c --reason 'suspected duplicate charges' --by soc@corp",
    )
    quarantine.add_argument("saga_id", metavar="SAGA_ID", help="the saga to freeze (its id, or the start of it)")
    add_reason_options(quarantine)
    _common(quarantine)

    resume = add_verb(
        verbs, "resume", _run_resume,
        about=(
            "Lift a halt on a scope, the drain (--drain), or one saga's quarantine (--saga). "
            "Exits 1 when there was nothing to lift."
        ),
        examples=(
            "examples:\n  agent-saga resume --scope tool:wire.send --by soc@corp\n"
            "  agent-saga resume --drain --by ci@corp\n  agent-saga resume --saga saga-8f3c --by soc@corp"
        ),
    )
    resume.add_argument("--scope", help="the halt scope to lift (as given to halt)")
    resume.add_argument("--drain", action="store_true", help="lift the drain")
    resume.add_argument("--saga", dest="saga_id", help="lift this saga's quarantine (its id, or the start of it)")
    add_reason_options(resume, reason_required=False)
    _common(resume)

    status = add_verb(
        verbs, "status", _run_status,
        about=(
            "Show what the kill switch holds. Exit 0: nothing in force; 1: something is halted, "
            "draining or quarantined; 3: the store could not be read."
        ),
        examples="example:\n  agent-saga status --store redis://switch.internal:6379/0",
    )
    _common(status, log=False)

    init = add_verb(
        verbs, "init-host", _run_init_host,
        about=(
            "Create /var/lib/agent-saga (the kill switch every process on the host obeys: readable by "
            "all users, writable by its owner, or by --group) and /etc/agent-saga/approver-keys (the public keys "
            "whose signatures make an approval count: root only) and /etc/agent-saga/approver-passkeys (the registered "
            "passkeys: root only). Safe to run again; it resets the modes."
        ),
        examples="examples:\n  sudo agent-saga init-host\n  sudo agent-saga init-host --group agent-saga-ops",
    )
    init.add_argument("--group", help="operators' group: its members may halt, drain and resume without root")


def _switch(args: argparse.Namespace, log: bool = True) -> Any:
    """The switch ``--store`` names, acting on that store alone, with the log the change goes to."""
    from agent_saga.errors import ConfigurationError
    from agent_saga.gate import KillSwitch
    from agent_saga.gate._switch import open_switch_store

    try:
        store = open_switch_store(args.store or os.environ.get("AGENT_SAGA_SWITCH") or None)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None
    return KillSwitch(store, host=False, wal=_log(args) if log else None)


def _log(args: argparse.Namespace) -> Any:
    """The log named by --wal-path (created if need be), else the default log if it exists, else None."""
    if args.wal_path:
        return open_log_to_write(args.wal_path)
    target = default_log()
    wal = open_log_to_write(target, create=False)
    if wal is None:
        print(f"agent-saga {args.verb}: not logged: there is no log at {target}, and one is never created unasked "
              "(the switch store records who and why; give --wal-path LOG to record it in a log too)",
              file=sys.stderr)
    return wal


def _guard(fn: Any, switch: Any) -> Any:
    """Run one switch operation; turn store and input errors into one-line CLI errors."""
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.gate import StoreUnavailable

    try:
        return fn()
    except StoreUnavailable as err:
        raise CliError(f"could not use the switch store: {err}", EXIT_UNCHECKED) from None
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except WALError as err:
        raise CliError(f"the change was made but could not be logged: {err}", EXIT_UNCHECKED) from None
    finally:
        if switch.wal is not None:
            switch.wal.close()


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run_halt(args: argparse.Namespace) -> int:
    from agent_saga.gate._switch import DEFAULT_TTL

    if args.drain == bool(args.scope):
        raise CliError("give exactly one of --scope SCOPE or --drain", EXIT_USAGE)
    ttl = DEFAULT_TTL if args.ttl is None else args.ttl
    switch = _switch(args)
    if args.drain:
        halt = _guard(lambda: switch.drain(reason=args.reason, by=args.by, ttl=ttl), switch)
        print(f"draining: no new sagas until {_when(halt.expires_at)} ({switch.store.location})")
    else:
        halt = _guard(lambda: switch.halt(args.scope, reason=args.reason, by=args.by, ttl=ttl), switch)
        print(f"halted {inert(halt.scope)} until {_when(halt.expires_at)} ({inert(switch.store.location)})")
    return EXIT_OK


def _run_quarantine(args: argparse.Namespace) -> int:
    saga_id = resolve_saga_id(args.saga_id, args.wal_path or None)
    switch = _switch(args)
    q = _guard(lambda: switch.quarantine(saga_id, reason=args.reason, by=args.by), switch)
    print(f"quarantined saga {inert(q.saga_id)}: frozen, not rolled back ({inert(switch.store.location)})")
    return EXIT_OK


def _run_resume(args: argparse.Namespace) -> int:
    if not (args.scope or args.drain or args.saga_id):
        raise CliError("say what to lift: --scope SCOPE, --drain or --saga SAGA_ID", EXIT_USAGE)
    saga_id = None
    if args.saga_id:
        status = _switch(args, log=False)
        frozen = [q.saga_id for q in _guard(status.status, status).quarantined]
        saga_id = resolve_saga_id(args.saga_id, args.wal_path or None, also=frozen)
    switch = _switch(args)
    count = _guard(
        lambda: switch.resume(args.scope, by=args.by, drain=args.drain, saga_id=saga_id, reason=args.reason),
        switch,
    )
    if not count:
        print("nothing to lift: no matching halt, drain or quarantine is in force")
        return EXIT_FINDING
    print(f"lifted {count} ({switch.store.location})")
    return EXIT_OK


def _run_init_host(args: argparse.Namespace) -> int:
    from agent_saga.errors import ConfigurationError
    from agent_saga.gate.host import init_host

    try:
        lines = init_host(args.group)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except OSError as err:
        raise CliError(f"cannot prepare {err.filename}: {err.strerror or err} (run it as root)", EXIT_UNCHECKED) from None
    for line in lines:
        print(line)
    return EXIT_OK


def _run_status(args: argparse.Namespace) -> int:
    switch = _switch(args, log=False)
    state = _guard(switch.status, switch)
    now = time.time()
    print(f"kill switch: {switch.store.location}")
    if not state.active:
        print("  nothing halted, no drain, no quarantine")
        return EXIT_OK
    for h in state.halts:
        print(f"  [HALT] {inert(h.scope)} by {inert(h.by)} at {_when(h.at)}: {inert(h.reason)} "
              f"(expires in {h.expires_at - now:.0f}s)")
    if state.drain is not None:
        d = state.drain
        print(f"  [DRAIN] by {inert(d.by)} at {_when(d.at)}: {inert(d.reason)} (expires in {d.expires_at - now:.0f}s)")
    for q in state.quarantined:
        print(f"  [QUARANTINE] saga {inert(q.saga_id)} by {inert(q.by)} at {_when(q.at)}: {inert(q.reason)}")
    return EXIT_FINDING
