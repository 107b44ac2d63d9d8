"""Build agent-saga-speedups: Cython compiles the core's log hot path, from the core's own files.

Each module of ``agent_saga.log.speedups.TWINS`` is copied, unchanged, from
``packages/core/src/agent_saga/log/`` to ``build/twin/agent_saga_speedups/`` and compiled
there as plain Python (Cython's pure-Python mode, annotations not used as C types, so the
compiled code has the pure code's semantics); the package's ``__init__`` records the SHA-256
of every file it compiled, and agent-saga runs the compiled twin only when those match its
own files (one source of truth). Run from the repository checkout: ``pip install
./packages/speedups`` (or ``uv build --wheel packages/speedups``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tomllib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
CORE = HERE.parent / "core" / "src"
TWINS = ("encodable", "codec", "chain")  # agent_saga.log.speedups.TWINS (a test checks they agree)
TREE = HERE / "build" / "twin"

if not (CORE / "agent_saga" / "log" / "codec.py").is_file():
    raise SystemExit(
        f"agent-saga-speedups compiles agent-saga's own source files, expected under {CORE}: build it from "
        "the agent-saga repository (packages/speedups), not from an sdist"
    )

version = re.search(r'__version__ = "([^"]+)"', (CORE / "agent_saga" / "_version.py").read_text())
ours = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]["version"]
if version is None or version.group(1) != ours:
    raise SystemExit(
        f"packages/speedups/pyproject.toml says version {ours}, but the core it compiles is "
        f"{version and version.group(1)}: give both the same version"
    )
# Reading the metadata (pip's resolver, egg_info) needs no compiler: compile only to build.
METADATA_ONLY = any(arg in ("egg_info", "dist_info") for arg in sys.argv[1:])

shutil.rmtree(TREE, ignore_errors=True)
package = TREE / "agent_saga_speedups"
package.mkdir(parents=True)
built_from = {}
for name in TWINS:
    source = (CORE / "agent_saga" / "log" / f"{name}.py").read_bytes()
    (package / f"{name}.py").write_bytes(source)
    built_from[name] = hashlib.sha256(source).hexdigest()
(package / "__init__.py").write_text(
    '"""agent_saga.log\'s hot path compiled by Cython; agent_saga.log.speedups puts it in place."""\n\n'
    f'__version__ = "{ours}"\n'
    "#: The SHA-256 of each agent_saga/log/<module>.py compiled here.\n"
    f"BUILT_FROM = {built_from!r}\n"
)


def compiled() -> list[Extension]:
    from Cython.Build import cythonize  # a build requirement, present only when building

    extensions = [
        Extension(f"agent_saga_speedups.{name}", [str(package / f"{name}.py")]) for name in TWINS
    ]
    return list(cythonize(
        extensions,
        build_dir=str(TREE / "c"),
        # binding: compiled functions introspect like Python ones (signature, __wrapped__ ...);
        # annotation_typing off: an `x: int` stays a Python object, so a value of another type
        # behaves as in the pure module instead of raising TypeError.
        compiler_directives={"language_level": 3, "binding": True, "annotation_typing": False},
        quiet=True,
    ))


setup(
    packages=["agent_saga_speedups"],
    package_dir={"": str(TREE.relative_to(HERE))},
    ext_modules=[] if METADATA_ONLY else compiled(),
)
