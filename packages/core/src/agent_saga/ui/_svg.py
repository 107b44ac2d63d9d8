"""A small SVG document builder shared by the renderers.

Documents are built with ``xml.etree.ElementTree``, so any text taken from a log
(tool names, causes, saga names) is escaped by the serializer and the output is
well-formed by construction. Before that, every text and attribute passes through
:func:`agent_saga.inert.inert`: control, bidi and invisible characters (which
include every character XML 1.0 cannot carry) are drawn as visible escapes, so a
bidi override in a tool's name cannot reorder what a viewer reads.
Attributes keep their insertion order, so one model always gives the same bytes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from agent_saga.inert import inert
from agent_saga.ui._theme import Look, Theme

__all__ = ["CHAR_WIDTH", "Svg", "clean_text", "fit", "style_attrs"]

#: Average advance of one character, in font-size units, for sizing boxes without font
#: metrics (the fonts a viewer has are unknown; labels are also cut to fit).
CHAR_WIDTH = 0.62
FONT = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"


def clean_text(text: str) -> str:
    """``text`` as it is drawn: inert (see :func:`agent_saga.inert.inert`), so XML-safe as well."""
    return inert(text)


def fit(text: str, width: float, size: float) -> str:
    """``text`` cut (with '...') so that its drawn (inert) form fits ``width`` pixels at font ``size``."""
    limit = max(4, int(width / (size * CHAR_WIDTH)))
    if len(inert(text)) <= limit:
        return text
    cut = text[: limit - 3]
    while len(inert(cut)) > limit - 3:  # escapes draw wider than the characters they stand for
        cut = cut[:-1]
    return cut + "..."


def style_attrs(look: Look) -> dict[str, str]:
    attrs = {"fill": look.fill, "stroke": look.stroke, "stroke-width": str(look.width)}
    if look.dash:
        attrs["stroke-dasharray"] = look.dash
    return attrs


def _attrs(attrs: dict[str, str]) -> dict[str, str]:
    """Keyword arguments as SVG attributes: ``stroke_width`` is ``stroke-width``; values made XML-safe."""
    return {k.replace("_", "-"): clean_text(v) for k, v in attrs.items()}


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


class Svg:
    """One SVG document: a title and description for screen readers, a style sheet, shapes."""

    def __init__(self, theme: Theme, title: str, desc: str, *, kind: str) -> None:
        self.theme = theme
        self.root = ET.Element("svg", {
            "xmlns": "http://www.w3.org/2000/svg", "role": "img", "aria-labelledby": "title desc",
            "data-kind": kind, "data-theme": theme.name,
        })
        ET.SubElement(self.root, "title", {"id": "title"}).text = clean_text(title)
        ET.SubElement(self.root, "desc", {"id": "desc"}).text = clean_text(desc)
        self.style = ET.SubElement(self.root, "style")
        self.style.text = (
            f"text{{font-family:{FONT};fill:{theme.ink}}}"
            f".mono{{font-family:{MONO}}}.muted{{fill:{theme.muted}}}.b{{font-weight:bold}}"
        )
        self.defs = ET.SubElement(self.root, "defs")
        self.background = self.rect(self.root, 0, 0, 0, 0, fill=theme.background)

    def mark(self, **attrs: str) -> None:
        """Attributes of the document itself (``data_*``: what tests and tools read back)."""
        for key, value in _attrs(attrs).items():
            self.root.set(key, value)

    def css(self, text: str) -> None:
        self.style.text = (self.style.text or "") + text

    def hatch(self, name: str, ground: str, stripe: str) -> str:
        """A diagonal stripe pattern over ``ground``; returns its ``url(#...)`` for a fill."""
        pattern = ET.SubElement(self.defs, "pattern", {
            "id": name, "width": "7", "height": "7", "patternUnits": "userSpaceOnUse",
            "patternTransform": "rotate(45)",
        })
        ET.SubElement(pattern, "rect", {"width": "7", "height": "7", "fill": ground})
        ET.SubElement(pattern, "rect", {"width": "3", "height": "7", "fill": stripe})
        return f"url(#{name})"

    @staticmethod
    def group(parent: ET.Element, **attrs: str) -> ET.Element:
        return ET.SubElement(parent, "g", _attrs(attrs))

    @staticmethod
    def tooltip(parent: ET.Element, content: str) -> None:
        """A ``<title>`` child: the text a pointer or a screen reader gets for ``parent``."""
        ET.SubElement(parent, "title").text = clean_text(content)

    @staticmethod
    def rect(parent: ET.Element, x: float, y: float, w: float, h: float, **attrs: str) -> ET.Element:
        base = {"x": _num(x), "y": _num(y), "width": _num(w), "height": _num(h)}
        return ET.SubElement(parent, "rect", base | _attrs(attrs))

    @staticmethod
    def line(parent: ET.Element, x1: float, y1: float, x2: float, y2: float, **attrs: str) -> ET.Element:
        base = {"x1": _num(x1), "y1": _num(y1), "x2": _num(x2), "y2": _num(y2)}
        return ET.SubElement(parent, "line", base | _attrs(attrs))

    @staticmethod
    def path(parent: ET.Element, d: str, **attrs: str) -> ET.Element:
        return ET.SubElement(parent, "path", {"d": d} | _attrs(attrs))

    @staticmethod
    def text(
        parent: ET.Element, x: float, y: float, content: str, size: float = 13, **attrs: str
    ) -> ET.Element:
        el = ET.SubElement(parent, "text", {"x": _num(x), "y": _num(y), "font-size": _num(size)}
                           | _attrs(attrs))
        el.text = clean_text(content)
        return el

    def finish(self, width: float, height: float) -> str:
        self.root.set("width", _num(width))
        self.root.set("height", _num(height))
        self.root.set("viewBox", f"0 0 {_num(width)} {_num(height)}")
        self.background.set("width", _num(width))
        self.background.set("height", _num(height))
        if not len(self.defs):
            self.root.remove(self.defs)
        return ET.tostring(self.root, encoding="unicode") + "\n"
