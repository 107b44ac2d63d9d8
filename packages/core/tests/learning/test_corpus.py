"""build_corpus: each executed step labelled by its fate, on logs the real engine wrote (FileWAL)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    Compensation,
    FileWAL,
    NotApplied,
    RecoveryDaemon,
    RetryPolicy,
    SagaAborted,
    build_corpus,
    call_with,
    compensator,
    saga_scope,
)
from agent_saga.engine.saga import Saga
from agent_saga.learning import Corpus, Example, Label
from agent_saga.log import read_records
from agent_saga.recovery.lease import lease_keeper


@compensator("test.corpus.undo")
def undo(n: int, idempotency_key: str | None = None) -> None: ...


@compensator("test.corpus.broken_undo")
def broken_undo(n: int, idempotency_key: str | None = None) -> None:
    raise ConnectionError("refund service down")


UNDO = "test.corpus.undo"


def undoable(n: int) -> Callable[[Any], Compensation]:
    return call_with(undo, n=n)


def declined() -> None:
    raise ValueError("card declined")


def by_step(corpus: Corpus, saga_id: str) -> dict[int, Example]:
    return {e.step: e for e in corpus if e.saga_id == saga_id}


def failed_at_four(wal: FileWAL) -> str:
    """Steps 1-3 work, step 4's call fails: the saga rolls back because of step 4."""
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal, name="checkout") as s:
        s.execute(tool="cart.reserve", semantics="COMPENSABLE", forward=lambda: {"id": 1}, compensate=undoable(1),
                  args={"sku": "A-1"})
        s.execute(tool="cart.reserve", semantics="COMPENSABLE", forward=lambda: {"id": 2}, compensate=undoable(2),
                  args={"sku": "B-2"})
        s.execute(tool="mail.draft", semantics="COMPENSABLE", forward=lambda: {"id": 3}, compensate=undoable(3))
        s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=declined, compensate=undoable(4),
                  args={"amount": 120})
    return aborted.value.report.saga_id


def test_a_later_failure_makes_the_earlier_steps_collateral_and_the_failing_one_undone(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "a.wal")
    saga_id = failed_at_four(wal)
    wal.close()
    steps = by_step(build_corpus(read_records(tmp_path / "a.wal")), saga_id)
    assert {i: e.label for i, e in steps.items()} == {
        1: Label.COLLATERAL, 2: Label.COLLATERAL, 3: Label.COLLATERAL, 4: Label.UNDONE}
    assert steps[4].result["call"] == "unknown" and steps[4].result["error"] == "ValueError"
    assert steps[1].result["undo"] == {"handler": UNDO, "args": {"n": "number"}}  # names and types, no values
    assert steps[4].args == {"amount": 120}


def test_an_example_carries_the_shape_of_what_the_call_returned_never_its_value(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    with saga_scope(wal, name="shapes") as s:
        s.execute(tool="db.get", semantics="REVERSIBLE", forward=lambda: {"id": "row-7", "tags": ["vip"]})
        s.execute(tool="db.scan", semantics="REVERSIBLE", forward=lambda: ["r"] * 3000)  # over the bound
        s.execute(tool="db.count", semantics="REVERSIBLE", forward=lambda: {"n": 5}, record_result="shape")
        s.execute(tool="db.ping", semantics="REVERSIBLE", forward=lambda: "pong", record_result="none")
    wal.close()
    got = {e.tool: e.result["returned"] for e in build_corpus(read_records(path))}
    assert got == {
        "db.get": {"type": "dict", "length": 2, "keys": {"id": "str", "tags": "list"}},  # from the recorded value
        "db.scan": {"type": "list", "length": 3000},  # from the recorded shape
        "db.count": {"type": "dict", "length": 1, "keys": {"n": "int"}},
        "db.ping": None,  # nothing recorded
    }
    rows = json.dumps(build_corpus(read_records(path)).rows())
    assert "row-7" not in rows and "vip" not in rows  # a shape, never a value
    # A log written before results were recorded (no result field): no shape, nothing else changes.
    old = [json.loads(line) for line in path.read_text().splitlines()]
    for record in old:
        record.get("body", {}).pop("result", None)
    assert [e.result["returned"] for e in build_corpus(old)] == [None] * 4
    assert [e.label for e in build_corpus(old)] == [e.label for e in build_corpus(read_records(path))]


def test_a_failure_of_the_agents_own_code_blames_no_step(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "a.wal")
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal, name="agent") as s:
        s.execute(tool="a.one", semantics="COMPENSABLE", forward=lambda: 1, compensate=undoable(1))
        s.execute(tool="a.two", semantics="COMPENSABLE", forward=lambda: 2, compensate=undoable(2))
        raise RuntimeError("the model changed its mind")
    wal.close()
    corpus = build_corpus(read_records(tmp_path / "a.wal"))
    assert [e.label for e in corpus if e.saga_id == aborted.value.report.saga_id] == [Label.COLLATERAL, Label.COLLATERAL]
    assert corpus.negatives() == [] and len(corpus.negatives(include_collateral=True)) == 2


def test_labels_of_a_mixed_log(tmp_path: Path) -> None:
    path = tmp_path / "mixed.wal"
    wal = FileWAL(path)
    with saga_scope(wal, name="fine") as s:
        s.execute(tool="doc.read", semantics="REVERSIBLE", forward=lambda: "text")
        s.execute(tool="crm.note", semantics="COMPENSABLE", forward=lambda: 1, compensate=undoable(1))
    with pytest.raises(SagaAborted), saga_scope(wal, name="dirty", compensation_retry=RetryPolicy(1)) as s:
        s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: 1,
                  compensate=call_with(broken_undo, n=1))
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: 1)
        raise RuntimeError("later")
    with saga_scope(wal, name="survived") as s:
        def not_applied() -> None:
            raise NotApplied("rejected before it ran")
        with pytest.raises(NotApplied):
            s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=not_applied, compensate=undoable(1))
        with pytest.raises(ValueError):
            s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=declined, compensate=undoable(2))
    wal.close()
    got = {(e.saga_name, e.tool, e.label) for e in build_corpus(read_records(path))}
    assert got == {
        ("fine", "doc.read", Label.KEPT), ("fine", "crm.note", Label.KEPT),
        # the world kept an irreversible effect; an undo that kept failing leaves its fate unresolved
        ("dirty", "mail.send", Label.KEPT), ("dirty", "pay.charge", Label.UNKNOWN),
        # definitely not applied is a failed call; a failed call of unknown outcome nothing settled is UNKNOWN
        ("survived", "pay.charge", Label.UNDONE), ("survived", "pay.charge", Label.UNKNOWN),
    }


def crashed(path: Path) -> str:
    """Two steps committed, then the process is gone: no end record, as a killed process leaves it."""
    wal = FileWAL(path)
    saga = Saga(wal, name="crashed")
    saga.start()
    saga.execute_sync(tool="vm.create", semantics="COMPENSABLE", forward=lambda: {"id": 1}, compensate=undoable(1))
    saga.execute_sync(tool="vm.attach", semantics="COMPENSABLE", forward=lambda: {"id": 2}, compensate=undoable(2))
    wal.barrier()
    lease_keeper().release(wal.path, saga.saga_id)
    wal.close()
    return saga.saga_id


def test_a_crashed_saga_is_unknown_until_recovery_resolves_it(tmp_path: Path) -> None:
    path = tmp_path / "crash.wal"
    saga_id = crashed(path)
    before = by_step(build_corpus(read_records(path)), saga_id)
    assert [e.label for e in before.values()] == [Label.UNKNOWN, Label.UNKNOWN]
    assert {e.saga_outcome for e in before.values()} == {"open"}
    with RecoveryDaemon(path, clock=lambda: time.time() + 3600, lease_grace=0) as daemon:
        daemon.sweep()
    after = by_step(build_corpus(read_records(path)), saga_id)
    # The daemon's rollback is the outcome: correct calls undone because the run died.
    assert [e.label for e in after.values()] == [Label.COLLATERAL, Label.COLLATERAL]


def test_context_holds_what_the_agent_knew_at_call_time_and_seqs_point_at_the_records(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    saga_id = failed_at_four(wal)
    wal.close()
    records = list(read_records(path))
    steps = by_step(build_corpus(records), saga_id)
    assert steps[1].context == ()
    assert [(c["tool"], c["args"], c["call"]) for c in steps[3].context] == [
        ("cart.reserve", {"sku": "A-1"}, "committed"), ("cart.reserve", {"sku": "B-2"}, "committed")]
    by_seq = {r["seq"]: r for r in records}
    for step, example in steps.items():
        kinds = {by_seq[s]["type"] for s in example.seqs}
        assert {by_seq[s].get("step") for s in example.seqs} <= {step, None}
        assert {"STEP_INTENT", "ROLLBACK_STARTED", "SAGA_ROLLED_BACK"} <= kinds


def test_both_forms_of_records_give_the_same_corpus(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    failed_at_four(wal)
    wal.close()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert build_corpus(lines) == build_corpus(read_records(path))
    assert build_corpus(path.read_text().splitlines()) == build_corpus(path)  # the lines, or the path
    with pytest.raises(TypeError, match="build_corpus: record 1 is a int, not a log record"):
        build_corpus([1])


def test_jsonl_round_trip(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "a.wal")
    failed_at_four(wal)
    wal.close()
    corpus = build_corpus(read_records(tmp_path / "a.wal"))
    assert corpus.to_jsonl(tmp_path / "c.jsonl") == len(corpus) == 4
    assert Corpus.from_jsonl(tmp_path / "c.jsonl").examples == corpus.examples
    (tmp_path / "bad.jsonl").write_text('{"tool": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not a corpus example"):
        Corpus.from_jsonl(tmp_path / "bad.jsonl")


# One call of a shop agent: (tool, amount, whether the call fails), three calls a saga.
CALL = st.tuples(st.sampled_from(["pay.charge", "pay.refund"]), st.integers(1, 5), st.booleans())


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sagas=st.lists(st.lists(CALL, min_size=1, max_size=3), min_size=1, max_size=6))
def test_pairs_stay_within_one_tool_and_comparable_contexts(tmp_path_factory: pytest.TempPathFactory,
                                                           sagas: list[list[tuple[str, int, bool]]]) -> None:
    path = tmp_path_factory.mktemp("pairs") / "p.wal"
    wal = FileWAL(path)
    for calls in sagas:
        try:
            with saga_scope(wal, name="shop") as s:
                for tool, amount, fails in calls:
                    s.execute(tool=tool, semantics="COMPENSABLE", forward=declined if fails else lambda: 1,
                              compensate=undoable(amount), args={"amount": amount})
        except SagaAborted:
            pass
    wal.close()
    corpus = build_corpus(read_records(path))
    by_seqs = {e.seqs: e for e in corpus}
    pairs = corpus.preference_pairs()
    for pair in pairs:
        good, bad = by_seqs[pair.chosen_seqs], by_seqs[pair.rejected_seqs]
        assert (good.label, bad.label) == (Label.KEPT, Label.UNDONE)
        assert good.tool == bad.tool == pair.tool
        assert good.path == bad.path and good.saga_name == bad.saga_name
        assert json.loads(pair.chosen) == good.args != bad.args == json.loads(pair.rejected)
        assert json.loads(pair.prompt) == {"saga": "shop", "tool": pair.tool, "before": [list(p) for p in good.path]}
    # and every pair that should exist does
    expected = {(g.seqs, b.seqs) for g in corpus.positives() for b in corpus.negatives()
                if g.tool == b.tool and g.path == b.path and g.args != b.args}
    assert {(p.chosen_seqs, p.rejected_seqs) for p in pairs} == expected


def test_pairs_never_cross_tools_or_use_collateral(tmp_path: Path) -> None:
    path = tmp_path / "p.wal"
    wal = FileWAL(path)
    for tool, fails in (("a.tool", False), ("b.tool", True), ("a.tool", True)):
        try:
            with saga_scope(wal, name="same") as s:
                s.execute(tool=tool, semantics="COMPENSABLE", forward=declined if fails else lambda: 1,
                          compensate=undoable(1), args={"fails": fails})
        except SagaAborted:
            pass
    wal.close()
    pairs = build_corpus(read_records(path)).preference_pairs()
    assert [(p.tool, json.loads(p.chosen), json.loads(p.rejected)) for p in pairs] == [
        ("a.tool", {"fails": False}, {"fails": True})]


def test_the_corpus_verb(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    failed_at_four(wal)
    with saga_scope(wal, name="checkout") as s:
        s.execute(tool="cart.reserve", semantics="COMPENSABLE", forward=lambda: {"id": 1}, compensate=undoable(1),
                  args={"sku": "A-1"})
        s.execute(tool="cart.reserve", semantics="COMPENSABLE", forward=lambda: {"id": 1}, compensate=undoable(1),
                  args={"sku": "B-2"})
        s.execute(tool="mail.draft", semantics="COMPENSABLE", forward=lambda: 3, compensate=undoable(3))
        s.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: 4, compensate=undoable(4),
                  args={"amount": 12})
    wal.close()
    ran = run_cli("corpus", "--wal-path", str(path), "--out", str(tmp_path / "c.jsonl"))
    assert ran.returncode == 0, ran.stderr
    assert "wrote 8 example(s)" in ran.stdout and "4 KEPT, 1 UNDONE, 3 COLLATERAL, 0 UNKNOWN" in ran.stdout
    assert len(Corpus.from_jsonl(tmp_path / "c.jsonl")) == 8
    ran = run_cli("corpus", "--wal-path", str(path), "--out", str(tmp_path / "p.jsonl"), "--pairs")
    assert ran.returncode == 0 and "wrote 1 preference pair(s)" in ran.stdout
    (pair,) = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert (json.loads(pair["chosen"]), json.loads(pair["rejected"])) == ({"amount": 12}, {"amount": 120})


def test_the_corpus_verb_refuses_a_log_that_does_not_verify(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    failed_at_four(wal)
    wal.close()
    path.write_text(path.read_text().replace('"amount":120', '"amount":1'))
    ran = run_cli("corpus", "--wal-path", str(path), "--out", str(tmp_path / "c.jsonl"))
    assert ran.returncode == 1 and "does not verify" in ran.stdout
    assert not (tmp_path / "c.jsonl").exists()
    assert run_cli("corpus", "--wal-path", str(tmp_path / "none.wal"), "--out", "x.jsonl").returncode == 3
    assert run_cli("corpus", "--wal-path", str(path)).returncode == 2  # --out is required


def test_parquet_without_the_extra_names_the_install(tmp_path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        # Only where the extra is installed (the `learning` env), which exercises the export itself
        # in test_corpus_export.py; the `core` and `core-fast` envs, without pyarrow, run this test.
        pytest.skip("pyarrow is installed here: the export itself is tested in test_corpus_export.py")
    wal = FileWAL(tmp_path / "a.wal")
    failed_at_four(wal)
    wal.close()
    corpus = Corpus(())
    with pytest.raises(ImportError, match=r"^Parquet and dataset export need pyarrow: pip install "
                                          r"'agent-saga\[corpus\]>=3.0.0'$"):
        corpus.to_parquet(tmp_path / "c.parquet")
    ran = run_cli("corpus", "--wal-path", str(tmp_path / "a.wal"), "--out", str(tmp_path / "c.parquet"))
    assert ran.returncode == 3 and "pip install 'agent-saga[corpus]>=3.0.0'" in ran.stderr


def test_a_call_whose_arguments_the_log_does_not_hold_is_never_paired(tmp_path: Path) -> None:
    # A failed REVERSIBLE call writes STEP_UNKNOWN only (it has no intent). Since issue 41 that record
    # carries the call's arguments; a log written before it does not, and there "{}" would be a lie.
    path = tmp_path / "r.wal"
    wal = FileWAL(path)
    for fails in (False, True):
        try:
            with saga_scope(wal, name="read") as s:
                s.execute(tool="doc.fetch", semantics="REVERSIBLE", forward=declined if fails else lambda: 1,
                          args={"url": "u"})
        except SagaAborted:
            pass
    wal.close()
    records = list(read_records(path))
    (unknown,) = [r for r in records if r["type"] == "STEP_UNKNOWN"]
    assert unknown["body"].pop("args") == {"url": "u"}  # as an older log held it: without them
    corpus = build_corpus(records)
    assert [(e.label, e.args_logged) for e in corpus] == [(Label.KEPT, True), (Label.UNDONE, False)]
    assert corpus.preference_pairs() == []


@pytest.mark.parametrize("agent_raises", [False, True])
def test_blame_goes_to_the_step_whose_error_the_rollback_names(tmp_path: Path, agent_raises: bool) -> None:
    # A failed irreversible call of unknown outcome: if it is why the saga rolled back it is UNDONE;
    # if the agent caught it and later failed for its own reasons, nothing settled it: UNKNOWN.
    path = tmp_path / "b.wal"
    wal = FileWAL(path)
    with pytest.raises(SagaAborted), saga_scope(wal, name="blame") as s:
        s.execute(tool="a.one", semantics="COMPENSABLE", forward=lambda: 1, compensate=undoable(1))
        if agent_raises:
            with pytest.raises(ValueError):
                s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=declined)
            raise RuntimeError("the agent gave up")
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=declined)
    wal.close()
    labels = {e.tool: e.label for e in build_corpus(read_records(path))}
    assert labels == {"a.one": Label.COLLATERAL, "mail.send": Label.UNKNOWN if agent_raises else Label.UNDONE}
