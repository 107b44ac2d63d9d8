"""``import agent_saga`` imports nothing heavy and starts no thread (issue 32: the import-time target).

The public names are imported from their home modules on first use (PEP 562). What is
pinned here is the property, not a duration: which modules an import loads, which threads
it starts, that every name is still listed and typed, and that the defaults the package
installs (the default gate, the leases) are still in place before the first saga.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agent_saga

INIT = Path(agent_saga.__file__)

# Modules that ``import agent_saga`` loaded before (98 of them with the engine, the log, the
# gate, recovery, the runtime): none of them is needed to import the package.
HEAVY = {"asyncio", "typing", "dataclasses", "inspect", "hashlib", "json", "re", "urllib.request",
         "concurrent.futures", "threading", "pluggy", "agent_saga.engine", "agent_saga.log", "agent_saga.gate",
         "agent_saga.context", "agent_saga.recovery", "agent_saga.runtime", "agent_saga.approvals",
         "agent_saga.learning", "agent_saga.engine.tool_pool"}


def _run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow  # a fresh interpreter: the fast lane starts no process
def test_import_loads_only_the_package_itself_and_starts_no_thread() -> None:
    # Compared before and after, in a fresh interpreter: site hooks load what they load first.
    seen = _run("""
        import json, sys, threading
        before, threads = set(sys.modules), threading.active_count()
        import agent_saga
        new = sorted(set(sys.modules) - before)
        listed = set(agent_saga.__all__) <= set(dir(agent_saga))
        print(json.dumps({"new": new, "threads": threading.active_count() - threads, "listed": listed}))
    """)
    new = set(seen["new"])  # type: ignore[call-overload]
    assert new & HEAVY == set(), f"import agent_saga imported {sorted(new & HEAVY)}"
    assert {m for m in new if m.startswith("agent_saga")} == {"agent_saga", "agent_saga._version", "agent_saga.boot"}
    assert seen["threads"] == 0
    assert seen["listed"] is True  # dir() lists every public name before any is used


@pytest.mark.slow
def test_the_defaults_the_package_installs_hold_for_the_first_saga_and_yield_to_a_setting() -> None:
    seen = _run("""
        import json, asyncio
        import agent_saga
        from agent_saga.engine.ports import lifecycles
        from agent_saga.context import default_gate
        hooks = sorted(type(h).__name__ for h in lifecycles())
        gate = type(default_gate()).__name__
        agent_saga.set_default_gate(None)  # an opt-out made before any saga ran is not undone
        after = default_gate()

        async def main():
            async with agent_saga.saga_scope(agent_saga.MemoryWAL()) as s:
                return await s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 1)

        print(json.dumps({"hooks": hooks, "gate": gate, "after": repr(after), "ran": asyncio.run(main()),
                          "subpackage": agent_saga.gate.PreFlightGate.__name__}))
    """)
    assert seen["gate"] == "DefaultGate"
    assert len(seen["hooks"]) == 2 and "LeaseLifecycle" in seen["hooks"]  # type: ignore[operator, arg-type]
    assert seen["after"] == "None" and seen["ran"] == 1
    assert seen["subpackage"] == "PreFlightGate"  # agent_saga.gate without importing it, as before


def _type_checking_names(tree: ast.Module) -> dict[str, str]:
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    names: dict[str, str] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}" + (f":{alias.name}" if alias.asname and
                                                                        alias.asname != alias.name else "")
        elif isinstance(node, ast.Assign):  # saga = guard
            target, value = node.targets[0], node.value
            assert isinstance(target, ast.Name) and isinstance(value, ast.Name)
            names[target.id] = names[value.id] + f":{value.id}"
    return names


def test_the_lazy_table_and_what_type_checkers_see_are_the_same_names_from_the_same_modules() -> None:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    seen = _type_checking_names(tree)
    table = agent_saga._PUBLIC
    missing = sorted(set(table) - set(seen))
    assert not missing, f"add to the TYPE_CHECKING block of agent_saga/__init__.py: {missing}"
    assert seen == table
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    for node in block.body:  # re-exported explicitly (`import X as X`), as mypy --strict needs
        if isinstance(node, ast.ImportFrom):
            assert all(a.asname == a.name for a in node.names), ast.unparse(node)


def test_every_public_name_is_its_home_modules_object() -> None:
    import importlib

    for name, home in agent_saga._PUBLIC.items():
        module, _, attribute = home.partition(":")
        assert getattr(agent_saga, name) is getattr(importlib.import_module(module), attribute or name), name
