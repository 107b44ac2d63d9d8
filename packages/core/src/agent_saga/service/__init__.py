"""Running agent-saga inside a web service.

``lifespan`` (FastAPI; imports ``fastapi``) wires the rest together: ``drain`` (the
sagas running here, and refusing new ones while stopping), ``sweeper`` (the recovery
daemon on a background thread) and ``readiness`` (the probe's signals). Only
``lifespan`` needs the ``[fastapi]`` extra.
"""

__all__: list[str] = []
