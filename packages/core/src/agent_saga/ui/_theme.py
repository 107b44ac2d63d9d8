"""Colours and line styles of every picture, per theme.

Each outcome differs in colour *and* border (width, dash) *and* words, so a picture
survives greyscale printing and red/green colour blindness. Text colours are chosen
for at least 4.5:1 contrast against the fills they sit on (WCAG AA).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DARK", "LIGHT", "THEMES", "Look", "Theme"]


@dataclass(frozen=True, slots=True)
class Look:
    fill: str
    stroke: str
    width: int
    dash: str  # SVG stroke-dasharray ("" = solid)


@dataclass(frozen=True, slots=True)
class Theme:
    name: str
    background: str
    ink: str  # text on the background and on every fill
    muted: str  # secondary text
    rule: str  # axes, chain links, separators
    looks: Mapping[str, Look]


_LIGHT_LOOKS: Mapping[str, Look] = {
    "compensated": Look("#d8f3dc", "#1b5e20", 2, ""),
    "failed": Look("#ffd6d6", "#b71c1c", 4, ""),
    "orphaned": Look("#ffe8cc", "#e65100", 2, "6 3"),
    "unresolved": Look("#eeeeee", "#424242", 2, "2 2"),
    "kept": Look("#f5f5f5", "#9e9e9e", 1, ""),
    "forward": Look("#e3f2fd", "#0d47a1", 1, ""),
    "refused": Look("#fafafa", "#757575", 1, "4 2"),
    "clean": Look("#c8e6c9", "#1b5e20", 3, ""),
    "dirty": Look("#ffcdd2", "#b71c1c", 4, ""),
    "open": Look("#fff9c4", "#f57f17", 3, "6 3"),
    "completed": Look("#bbdefb", "#0d47a1", 2, ""),
    "broken": Look("#ffcdd2", "#b71c1c", 3, ""),
    "sparse": Look("#eeeeee", "#bdbdbd", 1, "2 2"),
}

_DARK_LOOKS: Mapping[str, Look] = {
    "compensated": Look("#1b3a24", "#81c784", 2, ""),
    "failed": Look("#4a1414", "#ef5350", 4, ""),
    "orphaned": Look("#4a2a08", "#ffa726", 2, "6 3"),
    "unresolved": Look("#2e2e2e", "#bdbdbd", 2, "2 2"),
    "kept": Look("#262626", "#8a8a8a", 1, ""),
    "forward": Look("#0f2a47", "#64b5f6", 1, ""),
    "refused": Look("#222222", "#9e9e9e", 1, "4 2"),
    "clean": Look("#1e4620", "#81c784", 3, ""),
    "dirty": Look("#5a1717", "#ef5350", 4, ""),
    "open": Look("#4a3f08", "#ffd54f", 3, "6 3"),
    "completed": Look("#12324f", "#64b5f6", 2, ""),
    "broken": Look("#5a1717", "#ef5350", 3, ""),
    "sparse": Look("#262626", "#616161", 1, "2 2"),
}

LIGHT = Theme("light", "#ffffff", "#1a1a1a", "#555555", "#9e9e9e", _LIGHT_LOOKS)
DARK = Theme("dark", "#121417", "#f0f0f0", "#b8b8b8", "#6b6b6b", _DARK_LOOKS)
THEMES: Mapping[str, Theme] = {"light": LIGHT, "dark": DARK}
