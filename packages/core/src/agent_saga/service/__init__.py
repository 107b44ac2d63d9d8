"""Running agent-saga inside a web service (docs/SERVICE.md).

``saga_lifespan`` (FastAPI) wires the rest together: the drain (the sagas running here,
and refusing new ones while stopping), the sweeper (the recovery daemon on a background
thread) and the readiness probe's signals; ``SagaService`` is what it yields. Both are
resolved on use, as only they need the ``[fastapi]`` extra: ``import agent_saga.service``
imports no FastAPI. ``python -m agent_saga.service APP`` runs an app under uvicorn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SagaService", "saga_lifespan"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agent_saga.service import _lifespan

        return getattr(_lifespan, name)
    raise AttributeError(f"module 'agent_saga.service' has no attribute {name!r}")
