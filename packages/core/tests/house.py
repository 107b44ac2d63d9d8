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
