"""The figures of the core's house, read from the import contract: for an issue's closing note.

    python scripts/house_figures.py     (where import-linter is installed: `tox -e lint`'s env)

Prints the lines and modules of the kernel, each wing and the CLI (the three as the root
pyproject.toml's "the house" contract lists them); the imports between them, with how many
reach a private module (`_name`) of another part; module names that repeat; and the public
names (the top level's, and each wing's `__all__`). Type-checking-only imports are left out,
as the contract leaves them out.
"""

from __future__ import annotations

import ast
import collections
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "packages" / "core" / "src" / "agent_saga"


def main() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    house = next(c for c in contracts if c["name"].startswith("the house"))
    wings, kernel = ([m.strip() for m in layer.split(":")] for layer in house["layers"])
    # The command is the kernel's, counted apart: its size is the figure issue 42 §3 follows.
    part_of = {m.removeprefix("agent_saga."): "kernel" for m in kernel} | {"cli": "cli", "__main__": "cli"} | {
        w.removeprefix("agent_saga."): w.removeprefix("agent_saga.") for w in wings}

    def part(module: str) -> str:
        head = module.split(".")[1] if "." in module else "__init__"
        return part_of.get(head.removesuffix(".py"), "kernel")  # the package's own __init__: the kernel's

    lines: collections.Counter[str] = collections.Counter()
    modules: collections.Counter[str] = collections.Counter()
    for path in SRC.rglob("*.py"):
        name = part(".".join(("agent_saga", *path.relative_to(SRC).with_suffix("").parts)))
        lines[name] += len(path.read_text().splitlines())
        modules[name] += 1
    print(f"{sum(modules.values())} modules, {sum(lines.values())} lines")
    for name, count in lines.most_common():
        print(f"  {name:16} {count:6} lines {modules[name]:4} modules")

    graph = grimp.build_graph("agent_saga", exclude_type_checking_imports=True)
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    private: collections.Counter[tuple[str, str]] = collections.Counter()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            edge = (part(importer), part(imported))
            if edge[0] != edge[1]:
                edges[edge] += 1
                private[edge] += any(p.startswith("_") and not p.startswith("__") for p in imported.split(".")[1:])
    print(f"imports between parts: {sum(edges.values())} on {len(edges)} edges")
    for (a, b), count in sorted(edges.items()):
        print(f"  {a} -> {b}: {count}" + (f" ({private[a, b]} into private modules)" if private[a, b] else ""))

    homes = collections.defaultdict(list)
    for path in SRC.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            homes[path.stem.lstrip("_")].append(str(path.relative_to(SRC)))
    repeats = {name: places for name, places in homes.items() if len(places) > 1}
    print(f"module names that repeat: {len(repeats)}")
    for name, places in sorted(repeats.items()):
        print(f"  {name}: {', '.join(sorted(places))}")

    faces = {w: len(_assigned(SRC / w.removeprefix("agent_saga.") / "__init__.py", "__all__")) for w in wings}
    top_level = _assigned(SRC / "__init__.py", "_PUBLIC")  # the lazy table: every public name
    print(f"public names: {len(top_level)} at the top level, {sum(faces.values())} in the wings' faces")
    print("  " + ", ".join(f"{w.removeprefix('agent_saga.')} {n}" for w, n in sorted(faces.items())))
    print(f"private modules: {sum(1 for p in SRC.rglob('_*.py') if p.stem not in ('__init__', '__main__'))}")
    print(f"contracts: {len(contracts)}")


def _assigned(path: Path, name: str) -> list[str]:
    """The string elements of the list or dict literal assigned to ``name`` in ``path`` (read, not run)."""
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            items = node.value.keys if isinstance(node.value, ast.Dict) else getattr(node.value, "elts", [])
            return [item.value for item in items if isinstance(item, ast.Constant)]
    raise LookupError(f"{path} assigns no {name}")


if __name__ == "__main__":
    main()
