"""Load the installed adapters whose framework is present in range, one failure at a time.

What ``patch_all`` and the top-level ``wrap_tool`` share, in the manner of
OpenTelemetry's ``_load.py``: each adapter is checked from metadata before it is
imported (:mod:`agent_saga.plugins.discovery`), then imported and registered with the
plugin manager; one that cannot load is reported and the others proceed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent_saga.plugins.discovery import InstalledAdapter, adapters, disabled_adapters
from agent_saga.plugins.manager import Plugins

__all__ = ["Loaded", "load_adapters"]


@dataclass(frozen=True)
class Loaded:
    """What loading found: adapters registered, and by key why others were skipped or failed."""

    adapters: tuple[InstalledAdapter, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def load_adapters(manager: Plugins, only: Iterable[str] | None = None) -> Loaded:
    """Register every installed adapter (or those named in ``only``) that may load.

    Skipped, never imported: adapters not asked for, disabled in
    ``$AGENT_SAGA_DISABLED_ADAPTERS``, or whose framework is missing or out of range.
    Registering is idempotent: an adapter already registered stays as it is.
    """
    wanted = None if only is None else {name.replace("-", "_").lower() for name in only}
    disabled = disabled_adapters()
    loaded: list[InstalledAdapter] = []
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    for adapter in adapters():
        if wanted is not None and adapter.key not in wanted:
            skipped[adapter.key] = "not requested"
            continue
        if adapter.key in disabled:
            skipped[adapter.key] = "disabled by $AGENT_SAGA_DISABLED_ADAPTERS"
            continue
        ok, reason = adapter.framework_status()
        if not ok:
            skipped[adapter.key] = reason
            continue
        try:
            manager.register(adapter.entry_point.load(), adapter.key)
        except Exception as err:  # noqa: BLE001 - one adapter's failure must not stop the others
            failed[adapter.key] = f"{type(err).__name__}: {err}"
            manager.unregister(adapter.key)
            continue
        loaded.append(adapter)
    return Loaded(tuple(loaded), skipped, failed)
