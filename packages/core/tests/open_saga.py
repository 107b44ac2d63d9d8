"""Sagas for the log-maintenance tests: two settled ones, and one left open on purpose.

The open one's owner 'crashed' after one committed step, and nothing ends it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import pytest

from agent_saga import ActionSemantics, SagaAborted, saga_scope

__all__ = ["leave_open", "settle_two"]


def settle_two(wal: Any, compensate: Callable[..., Any]) -> dict[str, str]:
    """The ids of two settled sagas on the real engine: "done" completed, "undone" rolled back cleanly."""
    ids: dict[str, str] = {}
    with saga_scope(wal, name="done") as s:
        ids["done"] = s.saga_id
        s.execute(tool="db.insert", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 1},
                  compensate=compensate)
    with pytest.raises(SagaAborted), saga_scope(wal, name="undone") as s:
        ids["undone"] = s.saga_id
        s.execute(tool="db.insert", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 2},
                  compensate=compensate)
        raise RuntimeError("model gave up")
    return ids


def leave_open(wal: Any, compensate: Callable[..., Any], *, name: str = "running", release: bool = False) -> str:
    """The id of a saga that ran one COMPENSABLE ``db.insert`` and never ended.

    It runs in a context of its own, so the never-ended saga does not stay current for what
    follows. ``release``: its lease is let go at once, as when its process is gone (a file log).
    """

    def run() -> str:
        s = saga_scope(wal, name=name).__enter__()
        s.execute(tool="db.insert", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 3},
                  compensate=compensate)
        if release:
            from agent_saga.recovery.lease import lease_keeper

            lease_keeper().release(wal.path, s.saga_id)
        return s.saga_id

    return contextvars.copy_context().run(run)
