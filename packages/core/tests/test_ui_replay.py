"""The flight recorder's replay: frame for frame what the model says, and linear work, counted.

No timing here: the work is counted (records read, step entries served) for a run of n
steps and one of 2n, and a replay that folds every prefix again (or looks every step's
records up among all of them) does about four times the work for twice the run.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga.log.records import Record
from agent_saga.ui import Poll, RunStore, reconstruct
from agent_saga.ui import _runs as runs_module
from agent_saga.ui._frames import Replay
from agent_saga.ui._runs import _step_state

SAGA = "ab" * 16


class Counted(dict[str, Any]):
    """A record that counts every read of one of its fields (the work done on it)."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        Counted.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        Counted.reads += 1
        return super().__getitem__(key)


class ListSource:
    """A log held in a list: its records arrive on the first poll."""

    location = "memory"

    def __init__(self, records: list[Record]) -> None:
        self._records: list[Record] | None = records

    def poll(self) -> Poll:
        records, self._records = self._records or [], None
        return Poll(records)


def record(seq: int, rtype: str, step: int | None = None, **body: Any) -> Record:
    r = Counted(seq=seq, ts=1_000_000 + seq, saga=SAGA, type=rtype, body=body)
    if step is not None:
        r["step"] = step
    return r


def long_run(steps: int) -> list[Record]:
    """One saga of ``steps`` compensable steps that rolls back, newest first: about 4 records a step."""
    out = [record(1, "SAGA_STARTED", name="long", owner="t:1")]
    for n in range(1, steps + 1):
        comp = {"handler": "h.undo", "kwargs": {"n": n}, "key": f"k{n}", "recoverable": True}
        out.append(record(len(out) + 1, "STEP_INTENT", n, tool="t.do", semantics="COMPENSABLE", op=f"o{n}",
                          args={"n": n}, compensation=comp))
        out.append(record(len(out) + 1, "STEP_COMMITTED", n, op=f"o{n}", compensation=comp))
    out.append(record(len(out) + 1, "ROLLBACK_STARTED", cause="asked"))
    for n in range(steps, 0, -1):
        out.append(record(len(out) + 1, "COMPENSATION_STARTED", n, attempt=1, key=f"k{n}"))
        out.append(record(len(out) + 1, "STEP_COMPENSATED", n, key=f"k{n}"))
    out.append(record(len(out) + 1, "SAGA_ROLLED_BACK"))
    return out


def store_of(records: list[Record]) -> RunStore:
    store = RunStore(ListSource(records))
    store.refresh()
    return store


def whole_replay(store: RunStore) -> list[dict[str, Any]]:
    """Every frame, page after page, as the page reads them."""
    frames: list[dict[str, Any]] = []
    start: int | None = 0
    while start is not None:
        page = store.replay(SAGA, start)
        assert page is not None
        assert page["start"] == start == len(frames)
        frames.extend(page["frames"])
        start = page["next"]
    return frames


def replay_work(steps: int) -> tuple[int, int]:
    """(record fields read, step entries served) by one whole replay of a run of ``steps`` steps."""
    store = store_of(long_run(steps))
    Counted.reads = 0
    frames = whole_replay(store)
    assert frames[-1]["verdict"] == "rollback clean" and len(frames) == 4 * steps + 3
    return Counted.reads, sum(len(f["changed"]) for f in frames)


def test_a_replay_does_linear_work_in_the_runs_length() -> None:
    reads_n, served_n = replay_work(60)
    reads_2n, served_2n = replay_work(120)
    # Folding every prefix again reads ~(4n)^2/2 records; serving every step in every frame
    # sends ~n^2 entries: both about quadruple when n doubles.
    assert reads_2n <= 2 * reads_n + 100, (reads_n, reads_2n)
    assert served_2n <= 2 * served_n + 10, (served_n, served_2n)


def run_view_work(steps: int) -> int:
    store = store_of(long_run(steps))
    Counted.reads = 0
    run = store.run(SAGA)
    assert run is not None and len(run["steps"]) == steps
    return Counted.reads


def test_the_run_view_reads_each_record_a_bounded_number_of_times() -> None:
    n, twice = run_view_work(60), run_view_work(120)
    assert twice <= 2 * n + 100, (n, twice)  # not each step's records looked up among all of them


def test_pages_are_bounded_and_a_hostile_run_is_cut_with_a_reason(monkeypatch: Any) -> None:
    monkeypatch.setattr(runs_module, "PAGE_FRAMES", 50)
    monkeypatch.setattr(runs_module, "PAGE_STEPS", 120)
    # 100 steps, then the end record flips 300 times: each flip redraws every step
    records = long_run(100)[:-1]
    for k in range(300):
        records.append(record(len(records) + 1, "SAGA_COMPLETED" if k % 2 else "SAGA_ROLLED_BACK"))
    store = store_of(records)
    start: int | None = 0
    pages = []
    while start is not None:
        page = store.replay(SAGA, start)
        assert page is not None
        pages.append(page)
        start = page["next"]
    for page in pages:
        served = sum(len(f["changed"]) for f in page["frames"])
        assert len(page["frames"]) <= 50
        assert served <= 120 or len(page["frames"]) == 1  # one frame is never split
    assert pages[-1]["total"] == len(records)
    assert sum(len(p["frames"]) for p in pages) == len(records)  # within the default budget: all of it
    assert all(p["truncated"] is None for p in pages)

    replay = Replay(SAGA, records, budget=5_000)
    frames = list(replay)
    assert replay.spent <= 5_000 and len(frames) < len(records)
    assert replay.truncated is not None and f"record {len(frames) + 1} of {len(records)}"  # the start record is frame 1 in replay.truncated


# Records of one saga, in any order: what each frame says must be what the model says of that prefix.
_STEP_TYPES = ["STEP_INTENT", "STEP_COMMITTED", "STEP_UNKNOWN", "STEP_NOT_APPLIED", "STEP_REFUSED",
               "COMPENSATION_STARTED", "COMPENSATION_FAILED", "STEP_COMPENSATED", "STEP_ORPHANED",
               "STEP_UNRESOLVED", "STEP_KEPT", "APPROVAL_REQUESTED", "ESCALATED"]
_SAGA_TYPES = ["SAGA_STARTED", "ROLLBACK_STARTED", "SAGA_COMPLETED", "SAGA_ROLLED_BACK", "RECOVERY_CLAIMED"]
_events = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(_STEP_TYPES), st.integers(1, 5), st.sampled_from(["a.x", "b.y"]),
                  st.sampled_from(["COMPENSABLE", "REVERSIBLE", "IRREVERSIBLE"])),
        st.tuples(st.sampled_from(_SAGA_TYPES), st.none(), st.none(), st.none()),
    ),
    max_size=40,
)


def full_frame(records: list[Record]) -> dict[str, Any] | None:
    built = reconstruct(records)
    if not built:
        return None
    saga = built[0]
    return {"status": saga.status, "verdict": saga.verdict, "verdict_kind": saga.verdict_kind,
            "tally": saga.tally(), "steps": [_step_state(s, saga.status) for s in saga.steps],
            "unwound": [s.index for s in saga.unwound]}


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events)
def test_every_frame_is_the_model_of_its_prefix(events: list[tuple[Any, ...]]) -> None:
    records: list[Record] = []
    for rtype, step, tool, semantics in events:
        body: dict[str, Any] = {}
        if step is not None:
            body = {"tool": tool, "semantics": semantics,
                    "compensation": {"handler": "h.undo", "kwargs": {}, "key": f"k{step}"}}
        records.append(record(len(records) + 1, rtype, step, **body))
    store = store_of(records)
    if store.run(SAGA) is None:
        assert store.replay(SAGA) is None
        return
    frames = whole_replay(store)
    expected = [f for n in range(1, len(records) + 1) if (f := full_frame(records[:n])) is not None]
    assert len(frames) == len(expected)
    shown: dict[int, dict[str, Any]] = {}
    for frame, want in zip(frames, expected, strict=True):
        shown.update((s["index"], s) for s in frame["changed"])
        steps = [shown[i] for i in sorted(shown)]
        got = {"status": frame["status"], "verdict": frame["verdict"], "verdict_kind": frame["verdict_kind"],
               "tally": frame["tally"], "steps": steps,
               "unwound": [s["index"] for s in reversed(steps) if s["outcome"]]}
        assert got == want
