"""Rollback invariants over random failure shapes, run against the real engine.

Each example is a saga of up to six steps. Every step has random semantics, a
forward call that succeeds, says it did nothing (NotApplied) or fails in an
unknown way, and an undo (known before the call or derived from the result)
that succeeds, fails a few times then succeeds, or never succeeds. The saga then
fails. Whatever the shape, the report and the calls actually made must agree
with the rules in docs/CONCEPTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    Compensation,
    MemoryWAL,
    NotApplied,
    Outcome,
    RetryPolicy,
    SagaAborted,
    compensator,
    saga_scope,
)
from agent_saga.registry import unregister
from agent_saga.semantics import StepState

ATTEMPTS = 3


@dataclass(frozen=True)
class Shape:
    semantics: str  # REVERSIBLE | COMPENSABLE | IRREVERSIBLE
    forward: str  # ok | not_applied | unknown
    undo: str  # none | derived | prebound
    undo_failures: int  # how many times the undo fails before it works (ATTEMPTS+ means never)


def shapes() -> st.SearchStrategy[Shape]:
    def build(semantics: str, forward: str, undo: str, failures: int) -> Shape:
        if semantics == "IRREVERSIBLE":
            undo = "none"
        elif semantics == "COMPENSABLE" and undo == "none":
            undo = "derived"
        return Shape(semantics, forward, undo, failures)

    return st.builds(
        build,
        st.sampled_from(["REVERSIBLE", "COMPENSABLE", "IRREVERSIBLE"]),
        st.sampled_from(["ok", "ok", "not_applied", "unknown"]),
        st.sampled_from(["none", "derived", "prebound"]),
        st.integers(min_value=0, max_value=ATTEMPTS + 1),
    )


class World:
    def __init__(self) -> None:
        self.undo_calls: list[tuple[int, str | None]] = []  # (step, idempotency key), in call order
        self.undone: list[int] = []  # undos that succeeded

    def undo(self, step: int, fail_first: int, idempotency_key: str | None = None) -> None:
        self.undo_calls.append((step, idempotency_key))
        if sum(1 for s, _ in self.undo_calls if s == step) <= fail_first:
            raise ConnectionError(f"undo of step {step} failed")
        self.undone.append(step)


@pytest.fixture(scope="module")
def handler() -> Any:
    world_box: dict[str, World] = {}

    @compensator("prop.undo")
    def undo(step: int, fail_first: int, idempotency_key: str | None = None) -> None:
        world_box["world"].undo(step, fail_first, idempotency_key)

    yield world_box
    unregister("prop.undo")


def run(shape_list: list[Shape], halt: bool, world: World) -> tuple[Any, MemoryWAL]:
    wal = MemoryWAL()
    fast = RetryPolicy(max_attempts=ATTEMPTS, base_delay=0)

    def forward_for(n: int, shape: Shape) -> Any:
        def forward() -> dict[str, int]:
            if shape.forward == "not_applied":
                raise NotApplied("rejected")
            if shape.forward == "unknown":
                raise TimeoutError("no answer")
            return {"n": n}
        return forward

    def undo_for(n: int, shape: Shape) -> Any:
        kwargs = {"step": n, "fail_first": shape.undo_failures}
        if shape.undo == "prebound":
            from agent_saga import call_with
            from agent_saga.registry import resolve

            return call_with(resolve("prop.undo"), **kwargs)
        if shape.undo == "derived":
            return lambda r: Compensation(handler="prop.undo", kwargs={"step": r["n"], "fail_first": shape.undo_failures})
        return None

    with pytest.raises(SagaAborted) as info:
        with saga_scope(wal, halt_on_compensation_failure=halt, compensation_retry=fast) as s:
            for n, shape in enumerate(shape_list, start=1):
                try:
                    s.execute(tool=f"t{n}", semantics=shape.semantics, forward=forward_for(n, shape),
                              compensate=undo_for(n, shape))
                except (NotApplied, TimeoutError):
                    pass  # the agent carries on; the step's state is what matters
            raise RuntimeError("the saga fails at the end")
    return info.value.report, wal


@pytest.mark.slow  # heavy (many examples or shapes): left to the full core env
@settings(max_examples=examples(300), deadline=None)
@given(st.lists(shapes(), min_size=1, max_size=6), st.booleans())
def test_rollback_invariants(handler: Any, shape_list: list[Shape], halt: bool) -> None:
    world = World()
    handler["world"] = world
    report, wal = run(shape_list, halt, world)
    by_step = {o.step: o for o in report.steps}
    ran = [n for n, s in enumerate(shape_list, start=1) if s.forward != "not_applied"]

    # exactly one outcome for every step that may have had an effect, none for the others
    assert sorted(by_step) == ran
    assert [o.step for o in report.steps] == sorted(ran, reverse=True)

    # undos ran newest first, each step's attempts contiguous and bounded, one key per step
    order = [s for s, _ in world.undo_calls]
    firsts = [s for i, s in enumerate(order) if i == 0 or order[i - 1] != s]
    assert firsts == sorted(set(order), reverse=True)
    for step in set(order):
        keys = {k for s, k in world.undo_calls if s == step}
        assert len(keys) == 1 and None not in keys
        assert order.count(step) <= ATTEMPTS
    assert len(world.undone) == len(set(world.undone))  # no undo took effect twice

    halted_at = None
    for n in sorted(ran, reverse=True):
        shape, outcome = shape_list[n - 1], by_step[n]
        if halted_at is not None:
            assert outcome.outcome is Outcome.UNRESOLVED and n not in order
            continue
        has_undo = shape.undo == "prebound" or (shape.undo == "derived" and shape.forward == "ok")
        if has_undo:
            works = shape.undo_failures < ATTEMPTS
            assert outcome.outcome is (Outcome.COMPENSATED if works else Outcome.FAILED)
            assert (n in world.undone) is works
            if not works and halt:
                halted_at = n
        elif shape.semantics == "REVERSIBLE" and shape.undo == "none":
            assert outcome.outcome is Outcome.KEPT
        elif shape.forward == "ok":
            assert outcome.outcome is Outcome.ORPHANED
            assert outcome.state is StepState.COMMITTED
        else:  # unknown outcome, and no undo known before the call
            assert outcome.outcome is Outcome.UNRESOLVED
            assert outcome.state is StepState.UNKNOWN

    assert report.halted is (halted_at is not None)
    assert report.clean == (
        not report.halted and all(o.outcome in (Outcome.COMPENSATED, Outcome.KEPT) for o in report.steps)
    )
    records = list(wal.records())
    assert records[-1]["type"] == "SAGA_ROLLED_BACK" and records[-1]["body"]["clean"] is report.clean
    compensated = [r["step"] for r in records if r["type"] == "STEP_COMPENSATED"]
    assert compensated == [o.step for o in report.compensated]
