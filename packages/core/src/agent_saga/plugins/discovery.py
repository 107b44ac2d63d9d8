"""Find installed adapters, and decide from metadata alone whether each may load.

Like OpenTelemetry's auto-instrumentation, nothing here imports an adapter or a
framework: an adapter is a candidate only when its framework is installed at a
version inside the range the adapter declares (the extra of the adapter's own
distribution named like its entry point, e.g. ``agent-saga-langgraph[langgraph]``;
``openai_agents`` is the extra ``openai-agents``).
An adapter package makes the same check on itself before it imports its framework
(:func:`require_framework`), so an explicit import fails as clearly as ``patch_all``
skips.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import metadata

from agent_saga.install import pip_install
from agent_saga.plugins.requirements import Requirement, framework_requirements, installed_version

__all__ = [
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "FrameworkUnsupported",
    "InstalledAdapter",
    "adapters",
    "disabled_adapters",
    "framework_status",
    "require_framework",
]

ENTRY_POINT_GROUP = "agent_saga_adapters"
DISABLE_ENV = "AGENT_SAGA_DISABLED_ADAPTERS"


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name.strip()).lower()


def framework_status(distribution: str, extra: str, requirements: tuple[Requirement, ...]) -> tuple[bool, str]:
    """(ok, reason): whether every framework requirement is installed in range, and why not.

    ``reason`` names what is installed when ok (``"langgraph 1.2.24, langchain-core 1.8.3"``).
    """
    if not requirements:
        return False, (
            f"{distribution} declares no framework range (an extra named {extra!r}); "
            "cannot check the framework without importing it"
        )
    found: list[str] = []
    for requirement in requirements:
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


@dataclass(frozen=True)
class InstalledAdapter:
    """One installed adapter, as its metadata describes it (nothing imported)."""

    key: str  # the entry point's name, e.g. "langgraph"
    distribution: str  # e.g. "agent-saga-langgraph"
    target: str  # what the entry point loads
    requirements: tuple[Requirement, ...]
    entry_point: metadata.EntryPoint

    def framework_status(self) -> tuple[bool, str]:
        """(ok, reason): whether every declared framework requirement is met, and why not."""
        return framework_status(self.distribution, self.key, self.requirements)


def adapters() -> list[InstalledAdapter]:
    """Every adapter registered in the ``agent_saga_adapters`` entry-point group."""
    found: dict[str, InstalledAdapter] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "?"
        requirements = framework_requirements(dist, ep.name) if dist is not None else ()
        found.setdefault(_key(ep.name), InstalledAdapter(_key(ep.name), dist_name, ep.value, requirements, ep))
    return [found[k] for k in sorted(found)]


def disabled_adapters() -> frozenset[str]:
    """Adapter keys named in ``$AGENT_SAGA_DISABLED_ADAPTERS`` (comma or space separated)."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(_key(part) for part in re.split(r"[,\s]+", raw) if part.strip())


class FrameworkUnsupported(ImportError):
    """An adapter cannot run against the framework installed here (missing, out of range, or moved).

    Raised at import, before the adapter touches its framework; the message names the
    supported range, what is installed, and the command that installs a supported version.
    """

    def __init__(self, distribution: str, extra: str, problem: str) -> None:
        self.distribution = distribution
        self.extra = extra
        declared = _declared(distribution, extra)
        supported = ", ".join(str(r) for r in declared) or "its declared framework range"
        installed = ", ".join(f"{r.name} {installed_version(r.name) or 'missing'}" for r in declared)
        super().__init__(
            f"{distribution} supports {supported}{f' (installed: {installed})' if installed else ''}; "
            f"{problem}. Install a supported version with: {pip_install(distribution, extra)}",
            name=distribution.replace("-", "_"),
        )


def _declared(distribution: str, extra: str) -> tuple[Requirement, ...]:
    try:
        return framework_requirements(metadata.distribution(distribution), extra)
    except metadata.PackageNotFoundError:
        return ()


def require_framework(distribution: str, extra: str) -> str:
    """Check, without importing it, that ``distribution[extra]``'s framework is installed in range.

    An adapter package calls this first, before anything imports its framework. Returns
    what is installed (``"langgraph 1.2.24, langchain-core 1.8.3"``); raises
    :class:`FrameworkUnsupported` otherwise.
    """
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise FrameworkUnsupported(
            distribution, extra, f"{distribution} itself is not installed, so its range cannot be read"
        ) from None
    ok, reason = framework_status(distribution, extra, framework_requirements(dist, extra))
    if not ok:
        raise FrameworkUnsupported(distribution, extra, reason)
    return reason
