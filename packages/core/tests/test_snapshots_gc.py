"""The snapshot GC deletes a saga's snapshots only when a log that verifies says the saga is settled."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga.engine.snapshot import RESTORE_HANDLER, digest_of
from agent_saga.log.codec import chain_lines, decode_line, prepare_lines
from agent_saga.log.records import GENESIS
from agent_saga.snapshots import FileSnapshotStore, collect

FATES = ("completed", "rolled-back-clean", "rolled-back-unclean", "open", "no-start", "absent", "needed")
SETTLED = {"completed", "rolled-back-clean"}


class DictStore:
    """A SnapshotStore in a dict (the GC's logic, without a disk)."""

    name = "dict"

    def __init__(self) -> None:
        self.blobs: dict[str, dict[str, bytes]] = {}

    def put(self, saga_id: str, data: bytes) -> str:
        digest = digest_of(data)
        self.blobs.setdefault(saga_id, {})[digest] = data
        return digest

    def get(self, saga_id: str, digest: str) -> bytes:
        return self.blobs[saga_id][digest]

    def sagas(self) -> list[str]:
        return sorted(self.blobs)

    def delete_saga(self, saga_id: str) -> int:
        return len(self.blobs.pop(saga_id, {}))


def _records_for(saga: str, fate: str, digest: str, needs: str | None) -> list[tuple[str, str, int | None, dict[str, Any]]]:
    """The log's entries for one saga whose snapshot is ``digest``; ``needs``: a saga whose undo names it."""
    if fate in ("absent", "no-start"):
        return []
    undo = {"handler": RESTORE_HANDLER, "kwargs": {"store": "dict", "saga": needs or saga, "digest": digest,
                                                   "restore": "app.restore"}}
    out = [("SAGA_STARTED", saga, None, {"name": "s"}),
           ("STEP_INTENT", saga, 1, {"tool": "snapshot", "compensation": undo})]
    if fate == "completed":
        out.append(("SAGA_COMPLETED", saga, None, {}))
    elif fate == "rolled-back-clean":
        out.append(("SAGA_ROLLED_BACK", saga, None, {"clean": True}))
    elif fate == "rolled-back-unclean":
        out.append(("SAGA_ROLLED_BACK", saga, None, {"clean": False}))
    return out


def _chain(entries: list[tuple[str, str, int | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    ts = int(time.time() * 1e6)
    data, _ = chain_lines(prepare_lines([(ts + i, t, s, st, b) for i, (t, s, st, b) in enumerate(entries)]), 1, GENESIS)
    return [decode_line(line) for line in data.splitlines()]


@settings(max_examples=examples(200))
@given(
    fates=st.lists(st.sampled_from(FATES), min_size=1, max_size=8),
    order=st.randoms(use_true_random=False),
    tamper=st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
)
def test_gc_never_deletes_a_snapshot_of_an_unsettled_saga(fates: list[str], order: Any, tamper: int | None) -> None:
    store = DictStore()
    entries: list[tuple[str, str, int | None, dict[str, Any]]] = []
    per_saga: list[list[tuple[str, str, int | None, dict[str, Any]]]] = []
    needed: set[str] = set()
    for i, fate in enumerate(fates):
        saga = f"s{i}"
        digest = store.put(saga, json.dumps({"i": i}).encode())
        if fate == "needed":
            # Settled itself, but an open saga's undo (a repair's continuation) still names its snapshot.
            needed.add(saga)
            per_saga.append(_records_for(saga, "completed", digest, None))
            per_saga.append(_records_for(f"c{i}", "open", digest, saga))
        else:
            per_saga.append(_records_for(saga, fate, digest, None))
    # Interleave the sagas' records, each saga's in its own order.
    queues = [list(q) for q in per_saga if q]
    while queues:
        q = order.choice(queues)
        entries.append(q.pop(0))
        if not q:
            queues.remove(q)
    records = _chain(entries) if entries else []
    if tamper is not None and records:
        victim = records[tamper % len(records)]
        victim["body"] = {**victim.get("body", {}), "clean": True}  # a forged body: the chain breaks
    before = set(store.sagas())

    report = collect(store, records)

    deleted = before - set(store.sagas())
    assert deleted == set(report.deleted)
    if report.refused:
        assert not deleted
        assert tamper is not None
        return
    settled = {f"s{i}" for i, fate in enumerate(fates) if fate in SETTLED}
    # Never on a guess: only settled sagas, never one an unsettled undo still names ...
    assert deleted <= settled
    assert not deleted & needed
    # ... and not a GC that deletes nothing: every settled saga nobody needs goes.
    assert deleted == settled


def test_a_log_that_does_not_verify_deletes_nothing_and_says_why(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path / "snaps")
    digest = store.put("done1", b'{"a":1}')
    records = _chain([("SAGA_STARTED", "done1", None, {}), ("SAGA_COMPLETED", "done1", None, {})])
    log = tmp_path / "saga.wal"
    forged = dict(records[0], body={"name": "forged"})
    log.write_text("".join(json.dumps(r) + "\n" for r in [forged, records[1]]))

    report = collect(store, log)

    assert report.refused.startswith("the log does not verify (broken at seq 1")
    assert "deleted nothing" in report.summary()
    assert store.get("done1", digest) == b'{"a":1}'
    # The same log, intact, lets it go.
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert collect(store, log).deleted == {"done1": 1}
    assert store.sagas() == []


def test_a_saga_the_log_does_not_mention_is_kept(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path / "snaps")
    store.put("elsewhere", b"1")
    log = tmp_path / "saga.wal"
    records = _chain([("SAGA_STARTED", "here", None, {}), ("SAGA_COMPLETED", "here", None, {})])
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = collect(store, log)
    assert (report.deleted, report.kept) == ({}, ["elsewhere"])
