"""A pytest plugin that takes every wing away: ``pytest -p wingless`` (see test_house.py).

Loaded before any test module, it puts a finder first on ``sys.meta_path`` that refuses every
wing of the import contract (and the CLI above them) with the ModuleNotFoundError an install
without them would raise, so a kernel test that needs a wing fails at the import.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from house import BLOCKED


class NoWings(importlib.abc.MetaPathFinder):
    """Refuses the packages named in ``BLOCKED`` and every module inside them."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name in BLOCKED or name.rpartition(".")[0] in BLOCKED or name.startswith(tuple(f"{b}." for b in BLOCKED)):
            raise ModuleNotFoundError(f"No module named {name!r} (a wing: blocked by the wingless plugin)", name=name)
        return None


if any(name in sys.modules for name in BLOCKED):
    raise RuntimeError(f"a wing was imported before the wingless plugin: {sorted(set(BLOCKED) & set(sys.modules))}")
sys.meta_path.insert(0, NoWings())


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    leaked = sorted(name for name in sys.modules if name in BLOCKED or name.startswith(tuple(f"{b}." for b in BLOCKED)))
    if leaked:
        raise RuntimeError(f"a wing was imported despite the wingless plugin: {leaked}")
