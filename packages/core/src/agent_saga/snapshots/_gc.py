"""The conservative GC sweep: a snapshot goes only when its saga is settled in a log that verifies.

Settled is what compaction calls settled (``SAGA_COMPLETED``, or ``SAGA_ROLLED_BACK`` with
``clean: true``): a saga whose rollback left something standing keeps its snapshots, for
the operator who repairs it. Never on a guess:

* a log that does not verify (broken, unchained, partial) deletes nothing, and says why;
* a saga the log does not mention (another log's, or one whose records were compacted
  away) is kept;
* a snapshot that an unsettled saga's undo still names (a repair's continuation rebuilt
  from the log) is kept, whoever took it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.engine.snapshot import RESTORE_HANDLER, SnapshotStore
from agent_saga.log.chain import verify_file, verify_records
from agent_saga.log.maintenance import settled_sagas
from agent_saga.log.records import Record
from agent_saga.log.source import log_records
from agent_saga.recovery.daemon import set_snapshot_sweep

__all__ = ["GCReport", "collect", "collect_records", "needed_by_unsettled"]


@dataclass(slots=True)
class GCReport:
    """What one sweep of one store did (or, in a dry run, would do)."""

    store: str
    dry_run: bool = False
    deleted: dict[str, int] = field(default_factory=dict)  # saga -> blobs deleted
    kept: list[str] = field(default_factory=list)  # sagas whose snapshots stay
    refused: str = ""  # why nothing was deleted at all ('' when the sweep ran)

    def summary(self) -> str:
        if self.refused:
            return f"snapshot store {self.store!r}: deleted nothing: {self.refused}"
        done = (f"would delete the snapshots of {len(self.deleted)} settled saga(s)" if self.dry_run else
                f"deleted {sum(self.deleted.values())} snapshot(s) of {len(self.deleted)} settled saga(s)")
        return f"snapshot store {self.store!r}: {done}; kept those of {len(self.kept)} saga(s) not settled in this log"


def needed_by_unsettled(records: list[Record], settled: set[str]) -> set[str]:
    """Sagas whose snapshots an unsettled saga's recorded undo still names."""
    needed: set[str] = set()
    for record in records:
        if record.get("saga") in settled:
            continue
        body = record.get("body")
        comp = body.get("compensation") if isinstance(body, Mapping) else None
        if isinstance(comp, Mapping) and comp.get("handler") == RESTORE_HANDLER:
            kwargs = comp.get("kwargs")
            if isinstance(kwargs, Mapping) and isinstance(kwargs.get("saga"), str):
                needed.add(kwargs["saga"])
    return needed


def collect_records(store: SnapshotStore, records: list[Record], verified: Any, *, dry_run: bool = False) -> GCReport:
    """Sweep ``store`` against ``records`` whose chain verdict is ``verified`` (a VerifyReport)."""
    report = GCReport(store.name, dry_run=dry_run)
    if not verified.ok:
        where = f" at {verified.first_bad}" if getattr(verified, "first_bad", "") else ""
        report.refused = (
            f"the log does not verify ({verified.status}{where}: {verified.reason or 'no reason given'}); "
            "a snapshot is deleted only when a log that verifies says its saga is settled"
        )
        report.kept = store.sagas()
        return report
    settled = settled_sagas(records)
    settled -= needed_by_unsettled(records, settled)
    for saga in store.sagas():
        if saga not in settled:
            report.kept.append(saga)
        elif dry_run:
            report.deleted[saga] = 0
        else:
            report.deleted[saga] = store.delete_saga(saga)
    return report


def collect(store: SnapshotStore, log: Any, *, dry_run: bool = False) -> GCReport:
    """Sweep ``store`` against ``log`` (a log file's path, a WAL, or its records); see the module."""
    if isinstance(log, (str, os.PathLike)):
        verdict = verify_file(log)
        records = log_records(log, caller="snapshots gc") if verdict.ok else []
    else:
        records = log_records(log, caller="snapshots gc")
        verdict = verify_records(records)
    return collect_records(store, records, verdict, dry_run=dry_run)


set_snapshot_sweep(collect_records)  # the recovery daemon's GC of its snapshots= stores (the kernel names no wing)
