"""PatchConfig: what the runtimes ``patch_all`` patched consult on every call.

Its own module, below both :mod:`~agent_saga.plugins.patching` (which makes one) and the
hooks that receive one (:mod:`~agent_saga.plugins.hookspecs`,
:mod:`~agent_saga.plugins.manager`): with it in ``patching``, those modules and
``patching`` imported each other (``patching`` loads the manager to patch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_saga.plugins.policy import ToolPolicy

__all__ = ["PatchConfig"]


@dataclass(frozen=True)
class PatchConfig:
    """What the patched runtimes consult on every call."""

    policy: ToolPolicy = field(default_factory=ToolPolicy)
