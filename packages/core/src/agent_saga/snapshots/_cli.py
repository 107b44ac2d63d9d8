"""``agent-saga snapshots gc``: delete the durable snapshots of sagas the log says are settled."""

from __future__ import annotations

import argparse
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_group, add_log_option, add_verb, log_target
from agent_saga.log.resolve import is_url

__all__ = ["named_stores", "register"]


def register(verbs: Any) -> None:
    sub = add_group(
        verbs, "snapshots", "snapshots_verb", metavar="gc",
        about="Durable snapshots taken by saga.snapshot(..., store=...).",
        examples="examples:\n  agent-saga snapshots gc --wal-path ./agent-saga.wal --store ./snapshots --dry-run",
    )
    gc = add_verb(
        sub, "gc", run_gc, help="delete the snapshots of sagas that a log which verifies says are settled",
        about=(
            "Delete a saga's snapshots only when the log verifies and holds that saga's SAGA_COMPLETED, "
            "or its SAGA_ROLLED_BACK with clean true, and no unsettled saga's undo still names them. "
            "A log that does not verify deletes nothing (exit 1); a saga the log does not mention is kept."
        ),
        examples=(
            "examples:\n  agent-saga snapshots gc --wal-path ./agent-saga.wal --store ./snapshots\n"
            "  agent-saga snapshots gc --wal-path redis://127.0.0.1:6379/0?log=orders "
            "--store redis://127.0.0.1:6379/0 --name redis --dry-run"
        ),
    )
    add_log_option(gc, "the log that says which sagas are settled")
    gc.add_argument("--store", metavar="DIR|URL", required=True,
                    help="the snapshot store: a FileSnapshotStore's directory, or a redis:// or postgresql:// URL")
    gc.add_argument("--name", metavar="NAME", default=None,
                    help="the store's name, as the sagas' undos record it (default: file, redis or postgres)")
    gc.add_argument("--dry-run", action="store_true", help="say what would be deleted; delete nothing")


def _store(where: str, name: str | None) -> Any:
    from agent_saga.snapshots import FileSnapshotStore, PostgresSnapshotStore, RedisSnapshotStore

    if not where.strip():
        raise CliError("--store is empty: give the snapshot directory or a redis:// / postgresql:// URL", EXIT_USAGE)
    if where.startswith(("redis://", "rediss://", "unix://")):
        return RedisSnapshotStore(where, name=name or "redis")
    if where.startswith(("postgresql://", "postgres://")):
        return PostgresSnapshotStore(where, name=name or "postgres")
    if is_url(where) or "://" in where:
        raise CliError(f"--store {where!r}: not a directory nor a redis:// or postgresql:// URL", EXIT_USAGE)
    return FileSnapshotStore(where, name=name or "file")


def named_stores(specs: list[str]) -> list[Any]:
    """The daemon's ``--snapshot-store [NAME=]DIR|URL`` options as stores, registered for restores.

    A store the ``--import``ed modules registered under the same name is the one used.
    """
    from agent_saga.engine.snapshot import register_snapshot_store, snapshot_store

    stores = []
    for spec in specs:
        name, sep, where = spec.partition("=")
        if not sep or "/" in name or ":" in name:
            name, where = "", spec  # no NAME= prefix (a path or URL may hold '=' further on)
        store = _store(where, name or None)
        try:
            store = snapshot_store(store.name)
        except KeyError:
            register_snapshot_store(store)
        stores.append(store)
    return stores


def run_gc(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import read_log
    from agent_saga.inert import inert
    from agent_saga.log.chain import verify_records
    from agent_saga.snapshots._gc import collect_records

    target = log_target(args)
    records = read_log(target)
    try:
        store = _store(str(args.store), args.name)
        report = collect_records(store, records, verify_records(records), dry_run=args.dry_run)
    except CliError:
        raise
    except Exception as err:  # noqa: BLE001 - a store that cannot be reached is one line, exit 3
        raise CliError(f"snapshot store {args.store}: {err}", EXIT_UNCHECKED) from None
    for saga, count in sorted(report.deleted.items()):
        verb = "would delete" if args.dry_run else "deleted"
        print(inert(f"{verb} {saga}" + ("" if args.dry_run else f" ({count} snapshot(s))")))
    print(inert(report.summary()))
    return EXIT_FINDING if report.refused else EXIT_OK
