"""``agent-saga new NAME``: a small service to start from, whose tests pass on day one.

About ten files you can read in one sitting (``cli/scaffold/``, shipped in the wheel):
a FastAPI app on ``saga_lifespan`` with a fail-closed ``/readyz``, tools that declare
their semantics and register their undos by name, the log chosen by ``AGENT_SAGA_WAL``
(no default), a Dockerfile and compose file, and tests that prove the rollback runs.
What the template cannot decide is a ``TODO(agent-saga)``, never a plausible default;
``agent-saga doctor`` reports each one as a blocker.

Exit codes: 0 written; 2 usage (a name that is not a package name, a directory that
is not empty).
"""

from __future__ import annotations

import argparse
import keyword
import sys
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_OK, EXIT_USAGE, CliError
from agent_saga.cli.options import add_verb

__all__ = ["register", "run_new", "scaffold"]

_SUFFIX = ".tmpl"
_PACKAGE_DIR = "__package__"
# Names a new package must not take: they would shadow what the service imports.
_TAKEN = frozenset({"agent_saga", "fastapi", "starlette", "pydantic", "uvicorn", "tests", "test", "app"})


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "new", run_new, raw=False,
        examples="example: agent-saga new myagent && cd myagent && pytest && agent-saga doctor --replicas 3",
    )
    p.add_argument("name", help="the project's name; its Python package is the name with '-' as '_'")
    p.add_argument("--dir", default=".", metavar="PARENT", help="where to create NAME/ (default: here)")


def package_name(name: str) -> str:
    """The package a project called ``name`` gets; raises CliError when it cannot be one."""
    package = name.replace("-", "_").lower()
    if not package.isidentifier() or keyword.iskeyword(package) or not package.isascii():
        raise CliError(f"{name!r} cannot name a Python package; use letters, digits, '-' and '_' "
                       "(not starting with a digit)", EXIT_USAGE)
    if package in _TAKEN or package in sys.stdlib_module_names:
        raise CliError(f"{name!r} would shadow the module {package!r} the service needs; choose another name",
                       EXIT_USAGE)
    return package


def _templates(folder: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    found = []
    for item in sorted(folder.iterdir(), key=lambda t: t.name):
        if item.is_dir():
            found += _templates(item, (*prefix, item.name))
        elif item.name.endswith(_SUFFIX):
            found.append(((*prefix, item.name[: -len(_SUFFIX)]), item.read_text(encoding="utf-8")))
    return found


def scaffold(name: str, target: Path) -> list[Path]:
    """Write the project into ``target`` (which must not exist, or be empty); return its files."""
    package = package_name(name)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CliError(f"{target} already exists and is not an empty directory; choose another name or place",
                       EXIT_USAGE)
    written = []
    for parts, text in _templates(resources.files("agent_saga.cli") / "scaffold"):
        path = target.joinpath(*(package if p == _PACKAGE_DIR else p for p in parts))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("__PACKAGE__", package).replace("__NAME__", name), encoding="utf-8")
        written.append(path)
    return written


def run_new(args: argparse.Namespace) -> int:
    """Write a service to start from into ./NAME: FastAPI with saga_lifespan and a fail-closed /readyz,
    tools with declared semantics and undos registered by name, the log chosen by AGENT_SAGA_WAL, a
    Dockerfile, a compose file and tests that prove the rollback runs.
    """
    target = Path(args.dir) / args.name
    files = scaffold(args.name, target)
    print(f"created {target}/ ({len(files)} files):")
    for path in files:
        print(f"  {path.relative_to(target)}")
    print(f"\nnext: cd {target} && pip install -e '.[test]' && pytest\n"
          "then: agent-saga doctor --replicas N   # exits 1 while a blocker (or a TODO(agent-saga)) remains")
    return EXIT_OK
