"""Tentative resources: a business entity that is PENDING for as long as its saga runs.

Other readers see PENDING (and can wait or skip) instead of a state a rollback is
about to undo. ``register(resource_id)`` inside a saga is one COMPENSABLE step:
its effect is ``settle(resource_id=..., state="PENDING")``, and its undo,
declared before the call and logged in the step's intent, is
``settle(resource_id=..., state="ROLLED_BACK")``. So:

* the saga rolls back in its process: the undo runs with the other steps, LIFO;
* the process dies: the registration is in the log with a named handler, and the
  recovery daemon settles the stranded PENDING resource to ROLLED_BACK (the
  daemon must import the module that registers ``settle``);
* the saga commits: at its end (the engine's interceptor chain) ``settle(...,
  state="COMMITTED")`` runs, with a deterministic idempotency key.

``settle`` is a function registered with ``@compensator`` (its name is what the
log records). It must be idempotent; it receives ``idempotency_key`` if it takes one.

Not covered: a process that dies after its commit record is durable and before
``COMMITTED`` is settled leaves the resource PENDING with a committed saga;
nothing undoes it and nothing marks it. Settling COMMITTED before the commit
record would need a pre-commit hook in the engine (docs/FLEET.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator
from typing import Any

from agent_saga.context import current_saga
from agent_saga.engine.invoke import accepts_idempotency_key
from agent_saga.engine.observe import Interceptor, SagaEnd, SagaEvent, add_interceptor, remove_interceptor
from agent_saga.errors import ConfigurationError
from agent_saga.ids import operation_id
from agent_saga.registry import call_with
from agent_saga.semantics import ActionSemantics

__all__ = ["COMMITTED", "PENDING", "ROLLED_BACK", "TentativeResource"]

log = logging.getLogger("agent_saga.isolation")

PENDING, COMMITTED, ROLLED_BACK = "PENDING", "COMMITTED", "ROLLED_BACK"


class TentativeResource(Interceptor):
    """Resources of one kind, settled through one ``settle(resource_id, state)`` handler.

    Create it before the sagas that use it start (it learns that a saga committed
    through the interceptor chain); ``close()`` leaves the chain.
    """

    def __init__(self, settle: Callable[..., Any], *, kind: str = "resource") -> None:
        call_with(settle, resource_id="", state=ROLLED_BACK)  # refuses a handler the daemon could not find
        self.settle = settle
        self.kind = kind
        self._lock = threading.Lock()
        self._pending: dict[str, list[tuple[int, str]]] = {}  # saga -> (step, resource id)
        add_interceptor(self)

    def register(self, resource_id: str) -> None:
        """Mark ``resource_id`` PENDING as a step of the current saga (sync sagas)."""
        saga = self._saga()
        result = saga.execute_sync(**self._step(resource_id))
        self._remember(saga.saga_id, result)

    async def register_async(self, resource_id: str) -> None:
        """Mark ``resource_id`` PENDING as a step of the current saga (async sagas)."""
        saga = self._saga()
        result = await saga.execute(**self._step(resource_id))
        self._remember(saga.saga_id, result)

    def _saga(self) -> Any:
        saga = current_saga()
        if saga is None:
            raise ConfigurationError("a tentative resource is registered inside a saga (saga_scope / @saga)")
        return saga

    def _step(self, resource_id: str) -> dict[str, Any]:
        if not isinstance(resource_id, str) or not resource_id:
            raise ConfigurationError(f"a resource id is a non-empty string, got {resource_id!r}")
        settle = self.settle

        def pending(idempotency_key: str) -> dict[str, Any]:
            _call(settle, resource_id, PENDING, idempotency_key)
            return {"resource_id": resource_id, "key": idempotency_key}

        return {
            "tool": f"tentative.{self.kind}", "semantics": ActionSemantics.COMPENSABLE, "forward": pending,
            "args": {"resource_id": resource_id},
            "compensate": call_with(settle, resource_id=resource_id, state=ROLLED_BACK),
        }

    def _remember(self, saga_id: str, result: dict[str, Any]) -> None:
        with self._lock:
            mine = self._pending.setdefault(saga_id, [])
            mine.append((len(mine), result["resource_id"]))

    def saga(self, event: SagaEvent) -> Generator[None, SagaEnd, None]:
        end = yield
        with self._lock:
            mine = self._pending.pop(event.saga_id, [])
        if end.status != "COMPLETED":
            return  # rolled back: the undo ran; abandoned: the daemon will run it
        for index, resource_id in mine:
            key = operation_id(event.saga_id, index, f"tentative.{self.kind}:{resource_id}", "commit")
            try:
                _call(self.settle, resource_id, COMMITTED, key)
            except Exception:  # an observer never breaks a saga; the resource stays PENDING, said loudly
                log.exception("saga %s committed but %s %r could not be settled COMMITTED", event.saga_id,
                              self.kind, resource_id)

    def close(self) -> None:
        remove_interceptor(self)


def _call(settle: Callable[..., Any], resource_id: str, state: str, key: str) -> None:
    kwargs: dict[str, Any] = {"resource_id": resource_id, "state": state}
    if accepts_idempotency_key(settle):
        kwargs["idempotency_key"] = key
    settle(**kwargs)
