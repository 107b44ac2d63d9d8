"""numpy.asarray(saga.array) is a zero-copy view: tested here because this env has numpy.

numpy is not a dependency of the core; it arrives with the corpus extra (``datasets``
requires it), so the learning env is where the core's tests can import it.
"""

from __future__ import annotations

import pytest

import agent_saga as saga
from agent_saga import MemoryWAL, SagaAborted, saga_scope

# This module runs in the `learning` env, which has numpy; where it is absent (core, core-fast)
# test_array.py checks the same zero-copy view through memoryview.
np = pytest.importorskip("numpy")


def test_numpy_asarray_shares_the_arrays_memory() -> None:
    arr = saga.array([100.0, 250.0, 500.0])
    view = np.asarray(arr)
    assert view.dtype == np.float64 and view.flags["C_CONTIGUOUS"] and view.flags["WRITEABLE"]
    assert np.shares_memory(view, np.frombuffer(memoryview(arr), dtype=np.float64))
    view[0] = 1.0  # written through numpy: the array's own memory
    assert arr[0] == 1.0
    arr.rollback()  # restored in place: the numpy view sees it
    assert view.tolist() == [100.0, 250.0, 500.0]


def test_a_saga_rollback_restores_what_numpy_wrote_after_a_checkpoint() -> None:
    arr = saga.array([1, 2, 3])
    view = np.asarray(arr)
    try:
        with saga_scope(MemoryWAL()):
            arr.checkpoint()
            view *= 10
            assert arr.tolist() == [10, 20, 30]
            raise RuntimeError("x")
    except SagaAborted:
        pass
    assert view.tolist() == [1, 2, 3]
