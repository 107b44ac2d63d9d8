"""No two modules of agent_saga import each other, not even for types only.

import-linter (``tox -e lint``) checks the layers with type-checking imports left out; a
cycle made only of ``if TYPE_CHECKING:`` imports still ties two modules together (neither
can be read, moved or split without the other), so this reads every import statement,
those under ``TYPE_CHECKING`` and inside functions included.
"""

from __future__ import annotations

import ast
import functools
import pickle
from pathlib import Path

from agent_saga import RollbackReport, SagaAborted, SagaError

SRC = Path(__file__).resolve().parents[1] / "src"

# Cycles left for their own change, each named with why it is still there. A new cycle
# fails the test below; breaking one of these fails it too, until it is taken off the list.
KNOWN = {
    # unwind() takes the Saga it unwinds (type only): the split of Saga._step (issue 31 item 3).
    frozenset({"agent_saga.engine.saga", "agent_saga.engine.unwind"}),
    # The daemon starts its watch lazily; the watch names the daemon's types.
    frozenset({"agent_saga.recovery.daemon", "agent_saga.recovery.watch"}),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "agent_saga").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    # Parsing every source file costs about 1.5 s of CPU: read once per process, not once per test.
    return {name: frozenset(targets) for name, targets in _parse_graph().items()}


def import_graph() -> dict[str, set[str]]:
    """module -> the agent_saga modules it imports anywhere in its text (a fresh copy to change)."""
    return {name: set(targets) for name, targets in _graph().items()}


def _parse_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name``, mod
                targets = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    for alias in node.names
                ]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def test_the_graph_sees_type_only_and_function_level_imports() -> None:
    graph = import_graph()
    assert "agent_saga.engine.saga" in graph["agent_saga.engine.unwind"]  # under TYPE_CHECKING
    assert "agent_saga.plugins.manager" in graph["agent_saga.plugins.patching"]  # inside patch_all
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}


def test_no_import_cycle_but_the_known_ones() -> None:
    found = cycles(import_graph())
    assert found - KNOWN == set(), f"new import cycle(s): {sorted(map(sorted, found - KNOWN))}"
    assert KNOWN - found == set(), f"broken, take off KNOWN: {sorted(map(sorted, KNOWN - found))}"


def test_errors_and_the_plugins_stand_in_no_cycle() -> None:
    # errors.py sits below every layer: it imports nothing of the library (SagaAborted, which
    # carries a RollbackReport, lives in engine/report.py); PatchConfig has its own module.
    graph = import_graph()
    assert graph["agent_saga.errors"] == set()
    in_cycles = set().union(*cycles(graph))
    assert not {m for m in in_cycles if m.startswith("agent_saga.plugins") or m == "agent_saga.errors"}


def test_saga_aborted_beside_its_report_is_still_a_saga_error_and_pickles() -> None:
    err = SagaAborted(RuntimeError("boom"), RollbackReport("s1", "RuntimeError: boom", ()))
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, SagaError)
    assert (str(again), again.report, type(again.cause)) == (str(err), err.report, RuntimeError)
