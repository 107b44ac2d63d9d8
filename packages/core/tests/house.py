"""The house as the import contract draws it (the root pyproject.toml): the kernel (with the CLI), the wings.

Read from the contract itself, so that what the tests block and pin is what lint-imports
enforces, and a module added to neither list is noticed (test_house.py).
"""

from __future__ import annotations

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
