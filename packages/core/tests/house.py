"""The house as the import contract draws it (the root pyproject.toml): the kernel (with the CLI), the wings.

Read from the contract itself, so that what the tests block and pin is what lint-imports
enforces, and a module added to neither list is noticed (test_house.py).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CONTRACTS: list[dict[str, Any]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _contract(kind: str, name_starts: str) -> dict[str, Any]:
    return next(c for c in CONTRACTS if c["type"] == kind and c["name"].startswith(name_starts))


def siblings(layer: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in layer.replace("|", ":").split(":"))


HOUSE = _contract("layers", "the house")
WING_LAYER, KERNEL_LAYER = (siblings(layer) for layer in HOUSE["layers"])
WINGS: tuple[str, ...] = WING_LAYER
KERNEL: tuple[str, ...] = KERNEL_LAYER
#: What the wingless plugin refuses: every wing (each brings its own verbs, so the CLI stays).
BLOCKED: tuple[str, ...] = WINGS

#: Each wing's page in docs/: what it promises, and a "Names, records, verbs" section that lists
#: its face's ``__all__`` (test_wing_pages.py). Two pairs share a page, each with its own section:
#: learning and synthetic (LEARNING.md), service and observability (SERVICE.md).
PAGES: dict[str, str] = {
    "agent_saga.approvals": "APPROVALS.md",
    "agent_saga.audit": "AUDIT.md",
    "agent_saga.connectors": "CONNECTORS.md",
    "agent_saga.distributed": "DISTRIBUTED.md",
    "agent_saga.gate": "GATE.md",
    "agent_saga.isolation": "FLEET.md",
    "agent_saga.learning": "LEARNING.md",
    "agent_saga.mesh": "MESH.md",
    "agent_saga.observability": "SERVICE.md",
    "agent_saga.proving": "PROVING.md",
    "agent_saga.reconciliation": "RECONCILIATION.md",
    "agent_saga.runtime": "AGENT_RUNTIME.md",
    "agent_saga.service": "SERVICE.md",
    "agent_saga.snapshots": "SNAPSHOTS.md",
    "agent_saga.synthetic": "LEARNING.md",
    "agent_saga.testing": "TESTING.md",
    "agent_saga.ui": "VISUALS.md",
}


#: Where ARCHITECTURE.md holds the map below (test_wing_pages.py compares it with a fresh one).
MAP_START = "<!-- the house, drawn from the contracts by `python packages/core/tests/house.py --write`: do not edit -->"
MAP_END = "<!-- end of the house -->"


def house_map() -> str:
    """The kernel's layers, the kernel's named edge into a wing, and each wing with its page and the
    wings it may import: all read from the contracts (and PAGES), as a block for ARCHITECTURE.md."""
    def short(module: str) -> str:
        return module.replace("agent_saga.", "").replace(".**", "")

    layers = _contract("layers", "the kernel's own layers")["layers"]
    out = ["```", "the kernel, top to bottom (each layer imports only the layers below it):"]
    out += [f"  {short(layer)}" for layer in layers]
    for edge in HOUSE.get("ignore_imports", []):
        out.append(f"the kernel's one edge into a wing: {short(edge)}")
    allowed: dict[str, set[str]] = {wing: set() for wing in WINGS}
    for edge in _contract("independence", "the wings are independent")["ignore_imports"]:
        importer, imported = (re.match(r"agent_saga\.(\w+)", side.strip()) for side in edge.split("->"))
        assert importer and imported, edge
        allowed[f"agent_saga.{importer[1]}"].add(imported[1])
    out.append("the wings (independent, but for the imports named), each with its page in docs/:")
    width = max(len(short(w)) for w in WINGS) + 2
    for wing in WINGS:
        imports = f"imports {', '.join(sorted(allowed[wing]))}" if allowed[wing] else ""
        out.append(f"  {short(wing):{width}}{PAGES[wing]:20}{imports}".rstrip())
    out.append("```")
    return "\n".join(out)


def architecture_with_map(text: str) -> str:
    """``text`` (ARCHITECTURE.md) with the block between the markers replaced by a fresh map."""
    start, end = text.index(MAP_START) + len(MAP_START), text.index(MAP_END)
    return f"{text[:start]}\n{house_map()}\n{text[end:]}"


if __name__ == "__main__":
    architecture = ROOT / "docs" / "ARCHITECTURE.md"
    if sys.argv[1:] == ["--write"]:
        architecture.write_text(architecture_with_map(architecture.read_text()))
    else:
        print(house_map())
