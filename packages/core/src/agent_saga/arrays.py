"""``saga.array``: a typed, C-contiguous numeric array that a saga rolls back.

A :class:`SagaArray` *is* an ``array.array`` (a subclass): the buffer protocol is the
stdlib's, so ``memoryview(arr)`` and ``numpy.asarray(arr)`` are zero-copy views of its
memory on every supported Python (3.11 has no ``__buffer__`` for Python classes, a
subclass needs none). numpy is not a dependency.

Transactions:

* outside a saga, ``rollback()`` puts back the contents as of the last ``commit()`` (or
  construction);
* inside a saga, the first write through the array's own methods after each step
  boundary captures the whole buffer first (as a REVERSIBLE ``snapshot`` step, so a
  saga rollback restores it in LIFO order with the other undos). The state captured is
  the state at that boundary, since nothing wrote to the array in between.

What a capture costs: a copy of the *whole* buffer (``bytes(arr)``), once per step
boundary that is followed by a write; not copy-on-write of touched pages. Writes made
through an exported view (a memoryview, a numpy array) bypass the array's methods and
are not seen: call :meth:`SagaArray.checkpoint` before writing through a view inside a saga.
"""

from __future__ import annotations

import array as _array
from collections.abc import Iterable
from typing import Any, Self, SupportsIndex

from agent_saga.context import current_saga
from agent_saga.engine.saga import SagaStatus

__all__ = ["NUMERIC_TYPECODES", "SagaArray", "array"]

#: The typecodes of ``array.array`` that hold numbers (not 'u'/'w' characters).
NUMERIC_TYPECODES = frozenset("bBhHiIlLqQfd")

_base = _array.array


class SagaArray(_array.array):  # type: ignore[type-arg]
    """An ``array.array`` with ``commit()``/``rollback()`` and capture at a saga's step boundaries."""

    __slots__ = ("_committed", "_mark", "name")

    _committed: bytes
    _mark: tuple[str, int] | None
    name: str

    def __new__(cls, typecode: str, initializer: Iterable[Any] = (), *, name: str = "array") -> SagaArray:
        if not isinstance(typecode, str) or typecode not in NUMERIC_TYPECODES:
            raise ValueError(
                f"saga.array typecode {typecode!r} is not numeric: use one of {''.join(sorted(NUMERIC_TYPECODES))}"
            )
        self = super().__new__(cls, typecode, initializer)
        self._committed = bytes(self)
        self._mark = None
        self.name = name
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return (array, (self.tolist(), self.typecode), None)

    # -- transactions --------------------------------------------------------------------

    def commit(self) -> None:
        """Make the current contents the ones ``rollback()`` returns to (a whole-buffer copy)."""
        self._committed = bytes(self)

    def rollback(self) -> None:
        """Put back the contents as of the last ``commit()``."""
        self._restore(self._committed)

    def checkpoint(self) -> None:
        """Capture now, if inside a saga and not yet captured since its last step boundary.

        The array's own methods call this before every write; call it yourself before
        writing through a memoryview or numpy view inside a saga.
        """
        saga = current_saga()
        if saga is None or saga.status is not SagaStatus.OPEN:
            return
        mark = (saga.saga_id, len(saga.steps))
        if mark == self._mark:
            return
        saga.snapshot_sync(self.name, capture=lambda: bytes(self), restore=self._restore)
        self._mark = (saga.saga_id, len(saga.steps))  # the snapshot step itself is not a boundary

    def _restore(self, data: bytes) -> None:
        if len(data) == len(self) * self.itemsize:
            # In place, so a memoryview or numpy view of the array stays valid and sees it.
            memoryview(self).cast("B")[:] = data
        else:
            _base.__setitem__(self, slice(None), _base(self.typecode, data))

    # -- every write goes through checkpoint() first ----------------------------------------

    def __setitem__(self, index: Any, value: Any) -> None:
        self.checkpoint()
        _base.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        self.checkpoint()
        _base.__delitem__(self, index)

    def __iadd__(self, other: _array.array[Any]) -> Self:  # type: ignore[override]  # as typeshed's array.array
        self.checkpoint()
        _base.__iadd__(self, other)
        return self

    def __imul__(self, n: int) -> Self:
        self.checkpoint()
        _base.__imul__(self, n)
        return self

    def append(self, value: Any) -> None:
        self.checkpoint()
        _base.append(self, value)

    def extend(self, values: Iterable[Any]) -> None:
        self.checkpoint()
        _base.extend(self, values)

    def insert(self, index: int, value: Any) -> None:
        self.checkpoint()
        _base.insert(self, index, value)

    def pop(self, index: int = -1) -> Any:
        self.checkpoint()
        return _base.pop(self, index)

    def remove(self, value: Any) -> None:
        self.checkpoint()
        _base.remove(self, value)

    def reverse(self) -> None:
        self.checkpoint()
        _base.reverse(self)

    def byteswap(self) -> None:
        self.checkpoint()
        _base.byteswap(self)

    def frombytes(self, data: Any) -> None:
        self.checkpoint()
        _base.frombytes(self, data)

    def fromlist(self, values: list[Any]) -> None:
        self.checkpoint()
        _base.fromlist(self, values)

    def fromfile(self, f: Any, n: int) -> None:
        self.checkpoint()
        _base.fromfile(self, f, n)


def array(values: Iterable[Any] = (), typecode: str | None = None, *, name: str = "array") -> SagaArray:
    """A :class:`SagaArray` of ``values``: floats as 'd', ints as 'q' unless ``typecode`` says otherwise.

    ``name`` is what the log calls its snapshots. See the module for what a capture costs.
    """
    if typecode is None:
        if isinstance(values, _base):
            typecode = values.typecode
        else:
            values = list(values)
            kinds = {type(v) for v in values}
            if kinds <= {int}:
                typecode = "q"
            elif kinds <= {int, float}:
                typecode = "d"
            else:
                bad = next(v for v in values if type(v) not in (int, float))
                raise TypeError(
                    f"saga.array holds numbers; got {type(bad).__name__} {bad!r}: pass ints or floats (or a typecode)"
                )
    return SagaArray(typecode, values, name=name)
