"""saga.array: a typed C-contiguous array that commit()/rollback() and a saga's rollback restore."""

from __future__ import annotations

import array as stdlib_array
import asyncio
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

import agent_saga as saga
from agent_saga import ActionSemantics, Compensation, MemoryWAL, SagaAborted, saga_scope


def test_the_seed_snippet_runs_as_written() -> None:
    arr = saga.array([100.0, 250.0, 500.0])
    arr[0] = 999.0
    arr.rollback()
    assert arr.tolist() == [100.0, 250.0, 500.0] and arr.typecode == "d"


def test_memoryview_is_a_zero_copy_c_contiguous_view() -> None:
    arr = saga.array([1, 2, 3])
    view = memoryview(arr)
    assert (view.format, view.itemsize, view.c_contiguous, view.readonly) == ("q", 8, True, False)
    view[1] = 20  # written through the view: the same memory
    assert arr[1] == 20
    arr[2] = 30
    assert view[2] == 30
    arr.rollback()  # restored in place: the view stays valid and sees it
    assert view.tolist() == [1, 2, 3]


def test_rollback_returns_to_the_last_commit_whatever_the_writes() -> None:
    arr = saga.array([1.0, 2.0])
    arr.append(3.0)
    arr.commit()
    arr.extend([4.0, 5.0])
    del arr[0]
    arr *= 2
    arr.reverse()
    arr.rollback()
    assert arr.tolist() == [1.0, 2.0, 3.0]


@settings(max_examples=examples(100))
@given(
    start=st.lists(st.integers(-(2**62), 2**62), max_size=20),
    ops=st.lists(st.tuples(st.sampled_from(["set", "append", "pop", "extend", "insert", "commit", "reverse"]),
                           st.integers(-(2**62), 2**62)), max_size=30),
)
def test_rollback_matches_a_model_list(start: list[int], ops: list[tuple[str, int]]) -> None:
    arr = saga.array(start, "q")
    model, committed = list(start), list(start)
    for op, value in ops:
        if op == "set" and model:
            arr[value % len(model)] = value
            model[value % len(model)] = value
        elif op == "append":
            arr.append(value)
            model.append(value)
        elif op == "pop" and model:
            assert arr.pop() == model.pop()
        elif op == "extend":
            arr.extend([value, value])
            model.extend([value, value])
        elif op == "insert":
            arr.insert(value % (len(model) + 1), value)
            model.insert(value % (len(model) + 1), value)
        elif op == "commit":
            arr.commit()
            committed = list(model)
        elif op == "reverse":
            arr.reverse()
            model.reverse()
        assert arr.tolist() == model
    arr.rollback()
    assert arr.tolist() == committed


def test_a_saga_rollback_restores_it_in_lifo_order_with_the_other_undos() -> None:
    undone: list[str] = []
    arr = saga.array([100.0, 250.0, 500.0], name="balances")
    wal = MemoryWAL()

    async def run() -> None:
        async with saga_scope(wal) as s:
            arr[0] = 1.0  # captured first: [100, 250, 500]
            arr[1] = 2.0  # same step boundary: no second capture
            await s.execute(tool="charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: "c",
                            compensate=Compensation(fn=lambda: undone.append(f"refund saw {arr.tolist()}")))
            arr[2] = 3.0  # a new boundary: captured again, [1, 2, 500]
            raise RuntimeError("the agent failed")

    with pytest.raises(SagaAborted):
        asyncio.run(run())
    assert arr.tolist() == [100.0, 250.0, 500.0]
    # LIFO: the newest capture was restored before the refund ran, the oldest after it.
    assert undone == ["refund saw [1.0, 2.0, 500.0]"]
    snapshots = [r for r in wal.records() if r["type"] == "STEP_COMMITTED" and r["body"].get("tool") == "snapshot"]
    assert [r["body"]["args"] for r in snapshots] == [{"name": "balances"}, {"name": "balances"}]


def test_a_completed_saga_keeps_the_writes_and_the_log_holds_no_contents() -> None:
    arr = saga.array([7, 8, 9])
    wal = MemoryWAL()
    with saga_scope(wal):
        arr[0] = 70
    assert arr.tolist() == [70, 8, 9]
    assert "7" not in str([r["body"].get("result") for r in wal.records()])
    arr.rollback()  # outside a saga, commit()/rollback() are the array's own: the saga did not commit()
    assert arr.tolist() == [7, 8, 9]


def test_writes_through_a_view_are_captured_after_checkpoint() -> None:
    arr = saga.array([1, 2])
    with pytest.raises(SagaAborted), saga_scope(MemoryWAL()):
        arr.checkpoint()
        memoryview(arr)[0] = 99
        raise RuntimeError("x")
    assert arr.tolist() == [1, 2]


@pytest.mark.parametrize(("args", "error", "says"), [
    ((["a", 1],), TypeError, "saga.array holds numbers; got str 'a'"),
    (([True],), TypeError, "got bool True"),
    (([1], "u"), ValueError, "typecode 'u' is not numeric"),
])
def test_bad_input_is_one_clear_line(args: tuple[object, ...], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        saga.array(*args)  # type: ignore[arg-type]


def test_it_is_an_array_array_and_pickles_as_one() -> None:
    arr = saga.array(stdlib_array.array("f", [1.5]))
    assert isinstance(arr, stdlib_array.array) and arr.typecode == "f"
    again = pickle.loads(pickle.dumps(arr))
    assert again.tolist() == [1.5] and isinstance(again, saga.SagaArray)
