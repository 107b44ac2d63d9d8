"""Imported first by ``agent_saga.engine``: puts the step protocol's compiled twins in place.

When ``agent_saga.log.speedups`` chose the compiled form, the engine's modules listed in its
``ENGINE_TWINS`` must be in ``sys.modules`` before any engine module imports another; see
:func:`agent_saga.log.speedups.install_engine`.
"""

from __future__ import annotations

from agent_saga.log.speedups import install_engine

__all__: list[str] = []

install_engine()
