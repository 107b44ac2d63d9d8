"""``agent_saga.adapters.<framework>``: each adapter distribution, under one roof.

Every adapter ships a plain top-level package ``agent_saga_<framework>`` (distribution
``agent-saga-<framework>``). This package holds no adapter code of its own: a small
import finder (consulted after the normal ones) makes ``agent_saga.adapters.langgraph`` the very module ``agent_saga_langgraph``,
so it works the same for wheels and editable installs, and a missing adapter fails
with an ImportError that names the distribution to install.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

from agent_saga.install import pip_install

__all__ = ["distribution_for"]

_PREFIX = __name__ + "."


def distribution_for(framework: str) -> str:
    """The distribution that provides ``agent_saga.adapters.<framework>``."""
    return "agent-saga-" + framework.replace("_", "-")


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The real module already ran under its own name; the import system has just
        # stamped the alias's spec on it, and the module keeps its own identity.
        module.__spec__ = self._own_spec


class _AdapterFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX) or "." in fullname[len(_PREFIX):]:
            return None
        framework = fullname[len(_PREFIX):]
        real = f"agent_saga_{framework}"
        if importlib.util.find_spec(real) is None:
            dist = distribution_for(framework)
            raise ModuleNotFoundError(
                f"{fullname} is provided by the distribution {dist!r}, which is not installed; "
                f"install it with: {pip_install(dist)}",
                name=fullname,
            )
        return importlib.machinery.ModuleSpec(fullname, _Alias(real))


if not any(isinstance(f, _AdapterFinder) for f in sys.meta_path):
    sys.meta_path.append(_AdapterFinder())
