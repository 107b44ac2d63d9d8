"""Find installed adapters, and decide from metadata alone whether each may load.

Like OpenTelemetry's auto-instrumentation, nothing here imports an adapter or a
framework: an adapter is a candidate only when its framework is installed at a
version inside the range the adapter declares (the extra of the adapter's own
distribution named like its entry point, e.g. ``agent-saga-langgraph[langgraph]``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import metadata

from agent_saga.plugins.requirements import Requirement, framework_requirements, installed_version

__all__ = ["DISABLE_ENV", "ENTRY_POINT_GROUP", "Adapter", "adapters", "disabled_adapters"]

ENTRY_POINT_GROUP = "agent_saga_adapters"
DISABLE_ENV = "AGENT_SAGA_DISABLED_ADAPTERS"


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name.strip()).lower()


@dataclass(frozen=True)
class Adapter:
    """One installed adapter, as its metadata describes it (nothing imported)."""

    key: str  # the entry point's name, e.g. "langgraph"
    distribution: str  # e.g. "agent-saga-langgraph"
    target: str  # the module the entry point loads
    requirements: tuple[Requirement, ...]
    entry_point: metadata.EntryPoint

    def framework_status(self) -> tuple[bool, str]:
        """(ok, reason): whether every declared framework requirement is met, and why not."""
        if not self.requirements:
            return False, (
                f"{self.distribution} declares no framework range (an extra named {self.key!r}); "
                "cannot check the framework without importing it"
            )
        found: list[str] = []
        for requirement in self.requirements:
            version = installed_version(requirement.name)
            if version is None:
                return False, f"{requirement.name} is not installed"
            try:
                inside = requirement.contains(version)
            except ValueError as err:
                return False, f"{requirement.name} {version}: {err}"
            if not inside:
                return False, f"{requirement.name} {version} is outside the supported range {requirement}"
            found.append(f"{requirement.name} {version}")
        return True, ", ".join(found)


def adapters() -> list[Adapter]:
    """Every adapter registered in the ``agent_saga_adapters`` entry-point group."""
    found: dict[str, Adapter] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "?"
        requirements = framework_requirements(dist, ep.name) if dist is not None else ()
        found.setdefault(_key(ep.name), Adapter(_key(ep.name), dist_name, ep.value, requirements, ep))
    return [found[k] for k in sorted(found)]


def disabled_adapters() -> frozenset[str]:
    """Adapter keys named in ``$AGENT_SAGA_DISABLED_ADAPTERS`` (comma or space separated)."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(_key(part) for part in re.split(r"[,\s]+", raw) if part.strip())
