"""Which escalations of a log's queue are stale: their saga is not in the log any more.

The queue lives beside the log (``<log>.recovery/escalations.jsonl``) and outlives it: a log
deleted and written anew at the same path (an example run again, a test) leaves the old
log's escalations in the queue of the new one. They name sagas the log no longer holds, so
no one can act on them through it; ``agent-saga escalations`` marks them STALE and does not
count them as open. A log deleted and not written again leaves its queue behind alone: every
escalation in it is stale.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agent_saga.log.codec import decode_line
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import iter_lines
from agent_saga.log.resolve import is_url
from agent_saga.recovery.escalations import Escalation
from agent_saga.recovery.paths import recovery_dir

__all__ = ["orphaned_queue", "sagas_in", "stale_ids"]


def sagas_in(path: Path) -> set[str]:
    """The saga ids the log file at ``path`` holds (a line that is not a record is passed over)."""
    found: set[str] = set()
    with open_regular(path) as fh:
        for line in iter_lines(fh):
            if not line.raw.strip():
                continue
            try:
                saga = decode_line(line.raw).get("saga")
            except ValueError:
                continue  # a torn last line: the records before it are still the log
            if isinstance(saga, str):
                found.add(saga)
    return found


def stale_ids(escalations: Iterable[Escalation], path: Path) -> set[str]:
    """The ids of those ``escalations`` whose saga the log at ``path`` does not hold."""
    held = sagas_in(path)
    return {e.id for e in escalations if e.saga not in held}


def orphaned_queue(target: str) -> Path | None:
    """The log file ``target`` when it is gone and its escalation queue is still beside it; else None.

    Deleting a log leaves ``<log>.recovery/`` behind: its escalations name sagas no log holds.
    """
    if is_url(target) or not target.strip():
        return None
    path = Path(target)
    if path.exists() or not (recovery_dir(path) / "escalations.jsonl").is_file():
        return None
    return path
