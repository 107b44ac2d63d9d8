"""``agent-saga recover`` / ``agent-saga escalations`` and the ``saga-recoveryd`` command.

The log is a file or a server log's URL; its leases, claims, ledger and escalation
queue live beside it (``recovery.stores``). Recovery verifies the log's chain before
acting, whatever it is stored in; a chain that does not verify stops it (exit 1)
with the first bad record and ``--trust-unverified``.

Exit codes: 0 nothing left to do; 1 something needs a human (escalations
pending, a saga held or dead-lettered, a chain that does not verify); 2 usage;
3 the log, the escalation queue or ``<log>.recovery/`` could not be read or used.
With ``--watch`` (and ``saga-recoveryd``), a sweep that fails on a full disk is
retried at the next interval instead; a server that cannot be reached (it is
restarting) is retried with backoff, with one line when the outage begins and one
when it ends (``recovery.watch``); and a log that does not exist yet is waited for.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_saga.cli.main import CliError
from agent_saga.cli.options import add_imports_option, add_log_option, add_verb, import_modules, log_target
from agent_saga.errors import WALError
from agent_saga.inert import inert

__all__ = ["recoveryd_main", "register", "run_escalations", "run_recover"]

_EXIT_OK, _EXIT_FINDING, _EXIT_USAGE, _EXIT_UNCHECKED = 0, 1, 2, 3


def _add_daemon_options(p: argparse.ArgumentParser) -> None:
    add_log_option(p, "the log to recover")
    add_imports_option(p, "@compensator handlers, @reconciler functions and @durable entry points")
    p.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
    p.add_argument("--lease-grace", type=float, default=5.0, metavar="SECONDS",
                   help="extra wait beyond a lease's expiry (default: %(default)s)")
    p.add_argument("--max-attempts", type=int, default=5, metavar="N",
                   help="attempts per compensation before its saga is dead-lettered (default: %(default)s)")
    p.add_argument("--retry-delay", type=float, default=5.0, metavar="SECONDS",
                   help="wait after a failed compensation, doubling per failure (default: %(default)s)")
    p.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between sweeps with --watch (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument(
        "--trust-unverified", action="store_true",
        help="act on a log whose chain does not verify (after you investigated it); records that "
        "fail their own hash check are still never acted on, and each saga taken over says so in the log",
    )
    p.add_argument("--snapshot-store", dest="snapshot_stores", action="append", default=[], metavar="[NAME=]DIR|URL",
                   help="a durable snapshot store to restore from and to GC after each sweep (repeatable; "
                   "docs/SNAPSHOTS.md)")


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "recover", run_recover, raw=False,
        examples="example: agent-saga recover --wal-path agent-saga.wal --import myapp.connectors",
    )
    _add_daemon_options(p)
    p.add_argument("--watch", action="store_true", help="keep sweeping until interrupted")

    e = add_verb(
        verbs, "escalations", run_escalations, raw=False,
        examples="example: agent-saga escalations --wal-path agent-saga.wal",
    )
    add_log_option(e, "the log whose escalations to list")
    e.add_argument("--all", action="store_true", help="include resolved escalations")
    e.add_argument("--resolve", metavar="ID", help="mark escalation ID handled")
    e.add_argument("--note", default="", help="what was done (with --resolve)")


def _print_report(report: Any, quiet: bool) -> None:
    if not quiet:
        for action in report.actions:
            print(f"  {action.line()}")
        for escalation in report.new_escalations:
            print(f"  escalated: {escalation.line()}")
    for gc in getattr(report, "snapshots", ()):
        print(inert(gc.summary()))
    print(report.summary())


def _daemon(args: argparse.Namespace) -> Any:
    target, make = _daemon_maker(args)
    return _opened(target, make)


def _daemon_maker(args: argparse.Namespace, *, watching: bool = False) -> tuple[Path | str, Any]:
    """The log, and how to open a daemon on it (the options checked and the handlers imported first).

    ``watching``: a log file that does not exist yet is accepted (the watch waits for it).
    """
    from agent_saga.cli.options import given_log
    from agent_saga.log.resolve import is_url
    from agent_saga.recovery.daemon import RecoveryDaemon

    if args.max_attempts < 1:
        raise CliError(f"--max-attempts must be at least 1, got {args.max_attempts}", _EXIT_USAGE)
    if args.lease_grace < 0 or args.retry_delay < 0 or args.interval <= 0:
        raise CliError("--lease-grace and --retry-delay must be >= 0, --interval > 0 seconds", _EXIT_USAGE)
    raw = given_log(args)
    waits = watching and raw.strip() and not is_url(raw) and not os.path.lexists(raw)
    target = Path(raw) if waits else log_target(args)
    import_modules(args.imports, "@compensator handlers")
    from agent_saga.snapshots._cli import named_stores

    stores = named_stores(args.snapshot_stores)
    return target, lambda log: RecoveryDaemon(
        log, lease_grace=args.lease_grace, max_attempts=args.max_attempts, retry_delay=args.retry_delay,
        trust_unverified=args.trust_unverified, snapshots=stores,
    )


def _opened(target: Path | str, make: Any) -> Any:
    """``make(target)``; a server log that is missing or unreachable is exit 3 in one line."""
    from agent_saga.errors import ConfigurationError

    try:
        return make(target)
    except (WALError, ConfigurationError, OSError) as err:
        raise CliError(f"cannot open {target}: {err}", _EXIT_UNCHECKED) from None


def _sweep(daemon: Any, dry_run: bool) -> Any:
    from agent_saga.cli.progress import Progress

    with Progress("sweeping open sagas") as progress:
        report = daemon.sweep(dry_run=dry_run, progress=progress)
    if daemon.verdict is not None and not daemon.verdict.ok:
        print(f"WARNING: acting on a log whose chain does not verify ({inert(daemon.verdict.label)}); "
              "each saga taken over says so in the log", file=sys.stderr)
    return report


_SWEEP_ERRORS = (OSError, WALError, ImportError)  # what a sweep raises about the world, not a bug


def _failure(daemon: Any, err: Exception) -> CliError:
    """The one-line CLI error for a failed sweep."""
    from agent_saga.log.chain import ChainUnverified

    if isinstance(err, ChainUnverified):
        refusal = ChainUnverified.refusing(
            daemon.location, err.report, "recover from it",
            "investigate, then rerun with --trust-unverified to recover from it anyway (recorded in the log)",
        )
        return CliError(str(refusal), _EXIT_FINDING)
    if isinstance(err, OSError) and err.filename is not None:
        return CliError(f"cannot use {err.filename}: {err.strerror or err}", _EXIT_UNCHECKED)
    return CliError(f"could not read {daemon.location}: {err}", _EXIT_UNCHECKED)


def run_recover(args: argparse.Namespace, watch: bool | None = None) -> int:
    """Sweep a log once (or keep sweeping with --watch) and roll back every saga whose owner is gone:
    compensations newest-first through registered handlers, each exactly once; what cannot be undone
    goes to the human queue. A @durable run started with on_crash='resume' is resumed forward instead
    (its entry point's module --import'ed; docs/RESUME.md).
    """
    watching = args.watch if watch is None else watch
    if watching:
        return _watch(args)
    daemon = _daemon(args)
    try:
        try:
            report = _sweep(daemon, args.dry_run)
        except _SWEEP_ERRORS as err:
            raise _failure(daemon, err) from None
        _print_report(report, args.quiet)
        return _EXIT_FINDING if report.needs_attention else _EXIT_OK
    finally:
        daemon.close()


def _watch(args: argparse.Namespace) -> int:
    from agent_saga.errors import ConfigurationError
    from agent_saga.recovery.daemon import is_transient
    from agent_saga.recovery.watch import Watch

    target, make = _daemon_maker(args, watching=True)
    prog = getattr(args, "prog", "agent-saga recover")
    stop = threading.Event()
    last: list[Any] = [None]

    def say(line: str) -> None:
        # Error text can quote what the agent wrote: shown inert, like every line here.
        print(f"{prog}: {inert(line)}", file=sys.stderr, flush=True)

    def on_report(report: Any) -> None:
        last[0] = report
        if report.actions or report.new_escalations:
            _print_report(report, args.quiet)
            sys.stdout.flush()

    def on_error(daemon: Any, err: Exception) -> None:
        # Outages and a log not there yet never get here: the watch retries those itself.
        if daemon is None and isinstance(err, (WALError, ConfigurationError, OSError)):
            raise CliError(f"cannot open {target}: {err}", _EXIT_UNCHECKED) from None
        if not isinstance(err, _SWEEP_ERRORS):
            raise err
        if not is_transient(err):
            raise _failure(daemon, err) from None
        # A full disk now may have room at the next sweep: say so, and go on.
        say(f"sweep failed ({err}); retrying in {args.interval:g}s")

    def on_signal(signum: int, frame: object) -> None:
        # SIGTERM and the first Ctrl+C stop the watch between sweeps: an interrupt raised inside
        # a sweep would cut an undo in half. A second Ctrl+C interrupts at once.
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    watcher = Watch(lambda: make(target), interval=args.interval, say=say, on_report=on_report,
                    on_error=on_error, sweep=lambda daemon: _sweep(daemon, args.dry_run), location=_shown(target))
    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        watcher.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    report = last[0]
    return _EXIT_FINDING if report is not None and report.needs_attention else _EXIT_OK


def _shown(target: Path | str) -> str:
    """The log as it may be printed: a URL without its password."""
    from agent_saga.log.resolve import is_url
    from agent_saga.log.server import split_url

    return split_url(str(target))[2] if is_url(target) else str(target)


def _check_is_log(path: Path) -> None:
    """Refuse a file whose first record is not a log record: its 'queue' would read as empty."""
    from agent_saga.log.codec import decode_line
    from agent_saga.log.fs import open_regular
    from agent_saga.log.lines import is_torn, iter_lines

    with open_regular(path) as fh:
        for line in iter_lines(fh):
            if not line.raw.strip():
                continue
            if not line.terminated and is_torn(line.raw):
                return  # a first record still being written
            try:
                decode_line(line.raw)
            except ValueError as err:
                raise CliError(
                    f"{path} is not an agent-saga log (line {line.number} is not a record: {err}); "
                    "give the log's path with --wal-path", _EXIT_UNCHECKED,
                ) from None
            return


def run_escalations(args: argparse.Namespace) -> int:
    """List the escalation queue of a log; exit 1 while any is open."""
    from agent_saga.cli.options import given_log
    from agent_saga.cli.stale import orphaned_queue
    from agent_saga.recovery.escalations import queue_of
    from agent_saga.recovery.stores import recovery_store

    gone = orphaned_queue(given_log(args))
    if gone is not None:  # the log was deleted, its queue left beside it: nothing in it is open work
        if args.resolve:
            raise CliError(f"no log at {inert(str(gone))} to record the resolution in; every escalation of its queue "
                           f"is stale: delete {inert(str(gone))}.recovery once they are known to need nothing",
                           _EXIT_UNCHECKED)
        queue = queue_of(gone)
        shown = queue.all() if args.all else queue.pending()
        return _print_queue(shown, {e.id for e in shown}, f"their log {inert(str(gone))} is gone; delete "
                                                          f"{inert(str(gone))}.recovery once they are known to need nothing")
    target = log_target(args)
    if isinstance(target, Path):
        _check_is_log(target)
    store = _opened(target, recovery_store)
    try:
        queue = store.escalations()
        if args.resolve:
            try:
                found = queue.resolve(args.resolve, args.note)
            except KeyError as err:
                raise CliError(str(err.args[0]), _EXIT_USAGE) from None
            _record_resolution(store.open_wal(), found)
            print(f"resolved {inert(found.id)}")
        shown = queue.all() if args.all else queue.pending()
    except (OSError, WALError) as err:
        raise CliError(f"could not read the escalation queue of {target}: {err}", _EXIT_UNCHECKED) from None
    finally:
        store.close()
    return _print_queue(shown, _stale(shown, target), f"their saga is not in {inert(str(target))} (the log was "
                        "written anew, or the saga compacted away); resolve each with --resolve ID once it is known "
                        "to need nothing")


def _print_queue(shown: Sequence[Any], stale: set[str], why_stale: str) -> int:
    """Print the escalations ``shown`` (those in ``stale`` marked STALE) and the counts; the exit code."""
    for escalation in shown:
        print(escalation.line(stale=escalation.id in stale))
    pending = sum(1 for e in shown if not e.resolved and e.id not in stale)
    print(f"{pending} open escalation(s)")
    left = sum(1 for e in shown if not e.resolved and e.id in stale)
    if left:
        print(f"{left} stale: {why_stale}")
    return _EXIT_FINDING if pending else _EXIT_OK


def _stale(shown: Sequence[Any], target: Path | str) -> set[str]:
    """The ids of the escalations whose saga the log file does not hold (a server log: none checked)."""
    from agent_saga.cli.stale import stale_ids

    if not isinstance(target, Path) or not shown:
        return set()
    try:
        return stale_ids(shown, target)
    except OSError as err:
        raise CliError(f"could not read {target} to check its escalations: {err}", _EXIT_UNCHECKED) from None


def _record_resolution(wal: Any, escalation: Any) -> None:
    from agent_saga.log.records import RecordType

    wal.append(RecordType.ESCALATION_RESOLVED.value, escalation.saga, {
        "escalation": escalation.id, "kind": escalation.kind, "note": escalation.note,
        "by": f"human via agent-saga escalations ({os.environ.get('USER', 'unknown')})",
    }, escalation.step)
    wal.barrier()


def recoveryd_main(argv: Sequence[str] | None = None) -> int:
    """``saga-recoveryd``: the daemon; sweeps until stopped (``--once`` for a single pass)."""
    from agent_saga.cli.main import quiet_broken_pipe

    parser = argparse.ArgumentParser(
        prog="saga-recoveryd",
        description="Keep a log's dead sagas rolled back: sweep every --interval seconds.",
        epilog="exit codes: 0 ok, 1 needs a human, 2 usage error, 3 could not read the log",
    )
    _add_daemon_options(parser)
    parser.add_argument("--once", action="store_true", help="one sweep, then exit")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:
        return int(done.code or 0)
    args.prog = "saga-recoveryd"
    try:
        code = run_recover(args, watch=not args.once)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return quiet_broken_pipe()
    except CliError as err:
        print(f"saga-recoveryd: {inert(err)}", file=sys.stderr)
        return err.code
