"""Which form of the log's hot path runs: these pure-Python modules, or their compiled twin.

The optional distribution ``agent-saga-speedups`` (``packages/speedups``) compiles, with
Cython in pure-Python mode, the very files listed in :data:`TWINS` — the same source, copied
at build time under the package ``agent_saga_speedups`` — and records the SHA-256 of each
source file it compiled. When it is installed, :func:`install` (run by ``agent_saga.log`` before any
of its modules is imported) puts each compiled module in ``sys.modules`` under the pure
module's name, so every ``from agent_saga.log.codec import ...`` gets the compiled one.

It does so only when every compiled module was built from the source files beside this
one, byte for byte: a twin built from other sources is never run (it could write other
bytes). ``AGENT_SAGA_PURE=1`` forces the pure form (the twin tests run both). Without
the distribution, or on a machine without a compiler, the pure form runs: nothing is
compiled or downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from pathlib import Path

__all__ = ["PURE_ENV", "TWINS", "form", "install", "speedups_active"]

#: Set to 1 (or true/yes) to run the pure-Python form even when the compiled one is installed.
PURE_ENV = "AGENT_SAGA_PURE"
#: The modules of ``agent_saga.log`` with a compiled twin, in the order they are put in place
#: (each one's imports among them come before it).
TWINS = ("encodable", "codec", "chain")

_HERE = Path(__file__).parent
_active = False
_form = "pure Python (agent_saga.log.speedups.install() has not run)"


def speedups_active() -> bool:
    """Whether the compiled hot path (``agent-saga-speedups``) is the one running in this process."""
    return _active


def form() -> str:
    """One line saying which form runs, and why: for ``agent-saga doctor`` and bug reports."""
    return _form


def install() -> None:
    """Put the compiled twins in place of the pure modules when they may be (see the module docstring)."""
    global _active, _form
    if _active:  # in place already: a second look would find them imported and say "pure"
        return
    _form = _choose()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _choose() -> str:
    global _active  # set True only once every twin is in place
    if os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return f"pure Python ({PURE_ENV} is set)"
    try:
        native = importlib.import_module("agent_saga_speedups")
    except ImportError:
        return "pure Python (agent-saga-speedups is not installed)"
    built_from = getattr(native, "BUILT_FROM", None)
    version = getattr(native, "__version__", "?")
    if not isinstance(built_from, dict):
        return f"pure Python (agent-saga-speedups {version} does not say what it was built from: reinstall it)"
    for name in TWINS:
        try:
            ours = _sha256(_HERE / f"{name}.py")
        except OSError:
            return f"pure Python (the source of agent_saga.log.{name} cannot be read to check the compiled twin)"
        if built_from.get(name) != ours:
            return (
                f"pure Python (agent-saga-speedups {version} was compiled from another agent_saga/log/{name}.py "
                "than this one: rebuild it: `pip install --force-reinstall ./packages/speedups`, or `tox -r -e core`)"
            )
        if f"agent_saga.log.{name}" in sys.modules:
            return f"pure Python (agent_saga.log.{name} was imported before the compiled twin could be put in place)"
    package = sys.modules["agent_saga.log"]
    placed: list[str] = []
    for name in TWINS:
        try:
            module = importlib.import_module(f"agent_saga_speedups.{name}")
        except ImportError as err:  # built for another Python, or a missing runtime library
            for done in placed:  # all or none: the pure modules then import each other
                del sys.modules[f"agent_saga.log.{done}"]
                delattr(package, done)
            return f"pure Python (agent-saga-speedups {version} does not load here: {err})"
        sys.modules[f"agent_saga.log.{name}"] = module
        setattr(package, name, module)
        placed.append(name)
    _active = True
    return f"compiled (agent-saga-speedups {version}: agent_saga.log.{', .'.join(TWINS)})"


install()  # on import: agent_saga.log imports this module before any of its others
