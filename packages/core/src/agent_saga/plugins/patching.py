"""``patch_all()``: every installed framework's tool calls become saga steps.

For each adapter whose framework is installed in range (checked from metadata
*before* the adapter is imported), the adapter patches its framework so that a
tool call made inside a saga boundary becomes a step. What a tool *is* comes from
an explicit ``wrap_tool`` (left alone here), else the declarative
:class:`~agent_saga.plugins.policy.ToolPolicy`; a tool named nowhere is
*unclassified*: recorded and allowed in ``observe`` mode, refused before it runs in
``enforce`` mode. Outside a boundary every call passes straight through.

This module does not import pluggy until ``patch_all`` runs.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from agent_saga.context import current_saga
from agent_saga.errors import StepRefused
from agent_saga.plugins.config import PatchConfig
from agent_saga.plugins.policy import ToolPolicy
from agent_saga.toolspec import ToolSpec

__all__ = [
    "POLICY_ENV",
    "PatchConfig",
    "PatchReport",
    "Patches",
    "ToolNotClassified",
    "UnclassifiedCall",
    "classify",
    "clear_unclassified_calls",
    "current_config",
    "patch_all",
    "unclassified_calls",
    "unpatch_all",
]

POLICY_ENV = "AGENT_SAGA_POLICY"
log = logging.getLogger("agent_saga.plugins")


class ToolNotClassified(StepRefused):
    """Enforce mode: a tool no policy entry names was refused before it ran."""

    def __init__(self, tool: str, framework: str) -> None:
        super().__init__(
            tool,
            f"no tool policy entry names {tool!r} ({framework}); in enforce mode an unclassified tool "
            "never reaches a real system. Add it to the policy with its semantics, or wrap it with wrap_tool",
            rule="policy.unclassified",
        )
        self.framework = framework


@dataclass(frozen=True)
class PatchReport:
    """What ``patch_all`` did: adapter -> patched targets, adapter -> why skipped, and
    adapter -> why it failed (an adapter that raised while loading or patching leaves
    no patch of its own behind; the others still ran)."""

    patched: Mapping[str, tuple[str, ...]]
    skipped: Mapping[str, str]
    mode: str
    failed: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "patched": {k: list(v) for k, v in self.patched.items()},
            "skipped": dict(self.skipped),
            "failed": dict(self.failed),
        }


@dataclass(frozen=True)
class UnclassifiedCall:
    """A call of a tool that no policy entry and no wrap_tool classified."""

    tool: str
    framework: str
    saga_id: str
    mode: str
    refused: bool


class Patches:
    """Attribute replacements, recorded so that they can be undone exactly.

    Adapters build the replacement (with ``wrapt``); this only swaps and restores,
    so the core needs no dependency for it.
    """

    def __init__(self) -> None:
        self._applied: list[tuple[Any, str, bool, Any, str]] = []
        self._lock = threading.Lock()

    @property
    def applied(self) -> bool:
        return bool(self._applied)

    def targets(self) -> list[str]:
        return [label for *_, label in self._applied]

    def apply(self, owner: Any, attr: str, make: Any) -> None:
        """Replace ``owner.attr`` by ``make(original)`` (once; again is a no-op)."""
        # A module (a framework's function patched where its callers look it up) is named by its name.
        where = owner.__name__ if isinstance(owner, ModuleType) else (
            f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', owner)}")
        label = f"{where}.{attr}"
        with self._lock:
            if any(o is owner and a == attr for o, a, *_ in self._applied):
                return
            own = attr in vars(owner)
            original = vars(owner)[attr] if own else getattr(owner, attr)
            setattr(owner, attr, make(original))
            self._applied.append((owner, attr, own, original, label))

    def revert(self) -> list[str]:
        """Restore every replaced attribute, newest first; returns what was restored."""
        with self._lock:
            restored: list[str] = []
            while self._applied:
                owner, attr, own, original, label = self._applied.pop()
                if own:
                    setattr(owner, attr, original)
                else:
                    delattr(owner, attr)
                restored.append(label)
            return restored


_lock = threading.RLock()
_config: PatchConfig | None = None
_patched: dict[str, tuple[str, ...]] = {}
_observed: list[UnclassifiedCall] = []
_warned_outside = False  # the enforce-mode warning about a call outside every saga was given


def current_config() -> PatchConfig | None:
    """The configuration of the active ``patch_all``, or None when nothing is patched."""
    return _config


def unclassified_calls() -> tuple[UnclassifiedCall, ...]:
    """Unclassified tool calls seen inside saga boundaries since the last clear."""
    with _lock:
        return tuple(_observed)


def clear_unclassified_calls() -> None:
    with _lock:
        _observed.clear()


def classify(tool: str, framework: str, tool_args: Mapping[str, Any] | None = None) -> ToolSpec | None:
    """What a patched runtime should do with a call of ``tool`` right now.

    Returns the policy's ToolSpec; None to pass the call straight through (outside a
    boundary, or nothing patched). An unclassified tool inside a saga is recorded in
    the saga's log either way: in observe mode it runs and the saga notes it as
    unprotected (so it can never be reported clean); in enforce mode it is refused
    before it runs (:class:`ToolNotClassified`).
    """
    config = _config
    saga = current_saga()
    if config is None:
        return None
    if saga is None:
        if config.policy.mode == "enforce":
            _warn_outside(tool, framework)
        return None
    args = tool_args or {}
    try:
        spec = config.policy.spec_for(tool, args)
    except StepRefused as refusal:
        saga.refuse(tool, args, refusal, origin=framework)
        raise
    if spec is not None:
        return spec
    refused = config.policy.mode == "enforce"
    with _lock:
        _observed.append(UnclassifiedCall(tool, framework, saga.saga_id, config.policy.mode, refused))
    if refused:
        error = ToolNotClassified(tool, framework)
        saga.refuse(tool, args, error, origin=framework)
        raise error
    saga.note_unprotected(tool, args, origin=framework)
    return None


def _warn_outside(tool: str, framework: str) -> None:
    """Once per ``patch_all()``: an enforced policy protects nothing where no saga is open, and says so."""
    global _warned_outside
    with _lock:
        if _warned_outside:
            return
        _warned_outside = True
    warnings.warn(
        f"agent-saga: patch_all() enforces its policy inside a saga only; {framework} ran {tool!r} outside every "
        f"saga, unprotected. Run the agent through its run helper (saga_run from agent_saga.adapters.{framework}) "
        "or inside saga_scope() (said once per patch_all())",
        RuntimeWarning,
        stacklevel=2,
    )


def patch_all(
    policy: ToolPolicy | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    only: Iterable[str] | None = None,
) -> PatchReport:
    """Patch every installed framework at a supported version; idempotent.

    ``policy`` (a ToolPolicy, a dict, or a JSON file; default ``$AGENT_SAGA_POLICY``, else
    an empty observe-mode policy) classifies tools that were not wrapped explicitly.
    Adapters named in ``$AGENT_SAGA_DISABLED_ADAPTERS`` are skipped; so is any adapter
    whose framework is missing or out of range, without importing it.
    """
    global _config, _warned_outside
    from agent_saga.plugins.loader import load_adapters
    from agent_saga.plugins.manager import plugins

    if policy is None and os.environ.get(POLICY_ENV):
        policy = os.environ[POLICY_ENV]
    no_policy = policy is None
    config = PatchConfig(ToolPolicy.load(policy))
    with _lock:
        _config = config
        _warned_outside = False  # once per patch_all: a new policy may be enforced now
        manager = plugins()
        loaded = load_adapters(manager, only)
        skipped, failed = dict(loaded.skipped), dict(loaded.failed)
        for adapter in loaded.adapters:
            try:
                targets = manager.patch(adapter.key, config)
            except Exception as err:  # noqa: BLE001 - one adapter's failure must not stop the others
                failed[adapter.key] = f"{type(err).__name__}: {err}"
                _withdraw(manager, adapter.key)
                continue
            if targets:
                _patched[adapter.key] = tuple(targets)
            else:
                skipped[adapter.key] = "adapter patched nothing"
        if not _patched:
            _config = None
        report = PatchReport(dict(_patched), skipped, config.policy.mode, failed)
        # A plugin that patches no tools (the core's `openai`: model calls) is no framework the policy is for.
        of_tools = [key for key in _patched if getattr(manager.plugin(key), "patches_tools", True)]
    if no_policy:
        warnings.warn(_without_policy(of_tools), UserWarning, stacklevel=2)
    return report


def _without_policy(frameworks_patched: list[str]) -> str:
    """What ``patch_all()`` with no policy protects, said when it is called, not only in the report."""
    frameworks = ", ".join(frameworks_patched) or "no framework (none installed in range)"
    return (
        f"patch_all() without a tool policy: in {frameworks}, only tools made with wrap_tool are saga "
        "steps; every other tool call inside a boundary runs unprotected (recorded in "
        "agent_saga.plugins.unclassified_calls(), never undone, never refused). Pass a policy "
        f"(a dict, a JSON file or ${POLICY_ENV}) to make them steps"
    )


def _withdraw(manager: Any, key: str) -> None:
    """Undo whatever a failed adapter managed to patch, and forget it."""
    try:
        manager.unpatch(key)
    except Exception:
        log.exception("agent-saga: unpatching the failed adapter %r also failed", key)
    manager.unregister(key)


def unpatch_all() -> dict[str, tuple[str, ...]]:
    """Remove exactly what ``patch_all`` installed; returns adapter -> what was restored."""
    global _config
    with _lock:
        removed: dict[str, tuple[str, ...]] = {}
        if _patched:
            from agent_saga.plugins.manager import plugins

            manager = plugins()
            for key in list(_patched):
                removed[key] = tuple(manager.unpatch(key))
                del _patched[key]
        _config = None
        return removed
