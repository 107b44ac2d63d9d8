"""Draw what a log says happened: each saga's steps, and the fork where it unwound.

Both formats (Mermaid and Graphviz DOT) are rendered from ``ui._model``, built on
``recovery.fold``, the same reconstruction the recovery daemon acts on, so a
drawing cannot disagree with what recovery would do (nor with ``animate``).

The three outcomes that matter are three different shapes *and* colours *and*
words, so they survive greyscale and colour blindness: compensated (solid,
green), COMPENSATION FAILED - needs a human (heavy red border), ORPHANED - no undo
exists (dashed orange). A verdict node closes every unwind; it says clean only
when every step that may have landed was undone or needed no undo.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from agent_saga.inert import inert
from agent_saga.ui._model import LABELS, GraphSaga, GraphStep, build, short
from agent_saga.ui._theme import LIGHT

__all__ = ["GraphSaga", "GraphStep", "build", "to_dot", "to_mermaid"]

# fill, border, border width, dash pattern ("" = solid), for every style a node can wear
_STYLE = {
    name: (look.fill, look.stroke, look.width, look.dash)
    for name, look in LIGHT.looks.items()
    if name in ("compensated", "failed", "orphaned", "unresolved", "kept", "forward", "refused", "clean",
                "dirty", "open")
}


# What both renderers decide the same way.


def _fork_label(saga: GraphSaga) -> str:
    if saga.cause:
        return f"rollback: {short(saga.cause)}"
    return "rollback" if saga.status == "rolled back" else "process stopped here"


def _forward_style(step: GraphStep) -> str:
    return "refused" if step.state in ("refused", "not-applied") else "forward"


def _verdict_style(saga: GraphSaga) -> str:
    kind = saga.verdict_kind
    return "clean" if kind == "completed" else kind


def _refusal_line(step: GraphStep) -> str:
    """Which gate rule refused the step and why, one line (the reason is cut, never the rule)."""
    return short(f"refused by {step.refusal}", 200)


def _under_line(step: GraphStep) -> str:
    """The one line under a step: the runtime's verdict on it, else its refusal ("" for neither).

    A repair request or a thrash stop is also a refusal; its note says the same thing
    more exactly (the validation errors, the pattern), so the node shows it once.
    """
    if step.note:
        return step.note
    return _refusal_line(step) if step.refusal else ""


# The drawing both renderers write: the same nodes and edges, in the same order.


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    shape: str  # step | note | fork | end
    lines: tuple[str, ...]  # the label, one entry per line (raw text: each renderer escapes it)
    style: str  # a key of _STYLE ("" for the fork, drawn plain)


@dataclass(frozen=True, slots=True)
class _Edge:
    tail: str
    head: str
    kind: str  # next | said (a verdict's note) | fork (into the rollback) | undoes (an undo to its step)


def _drawing(saga: GraphSaga, p: str) -> Iterator[_Node | _Edge]:
    """One saga as nodes and edges: its steps, the runtime's verdicts, and the unwind if there was one."""
    previous = None
    for step in saga.steps:
        node = f"{p}_f{step.index}"
        under = _under_line(step)
        yield _Node(node, "step", (f"{step.index}. {step.tool}", step.state_line,
                                   *((under,) if under else ())), _forward_style(step))
        if previous is not None:
            yield _Edge(previous, node, "next")
        previous = node
    indexes = {step.index for step in saga.steps}
    for k, said in enumerate(saga.verdicts):
        node = f"{p}_a{k}"
        yield _Node(node, "note", (short(said.label, 96),), "clean" if said.kind == "ok" else "dirty")
        if said.after_step in indexes:
            yield _Edge(f"{p}_f{said.after_step}", node, "said")
    if saga.status != "completed":
        fork = f"{p}_rb"
        yield _Node(fork, "fork", (_fork_label(saga),), "")
        if previous is not None:
            yield _Edge(previous, fork, "fork")
        chain = fork
        for step in saga.unwound:
            node, outcome = f"{p}_u{step.index}", str(step.outcome)
            yield _Node(node, "step", (f"undo {step.index}. {step.tool}", LABELS[outcome]), outcome)
            yield _Edge(chain, node, "next")
            yield _Edge(node, f"{p}_f{step.index}", "undoes")
            chain = node
        yield _Node(f"{p}_v", "end", (saga.verdict,), _verdict_style(saga))
        yield _Edge(chain, f"{p}_v", "next")
    elif previous is not None:
        yield _Node(f"{p}_v", "end", ("completed",), "clean")
        yield _Edge(previous, f"{p}_v", "next")


# -- Mermaid ------------------------------------------------------------------------------


def _m(text: str) -> str:
    """Text safe inside a quoted Mermaid label, and inert (control and bidi characters shown escaped)."""
    return (inert(text).replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
            .replace(">", "#gt;"))


_MERMAID_SHAPES = {"step": ('["', '"]'), "note": ('[/"', '"/]'), "fork": ('{{"', '"}}'), "end": ('(["', '"])')}
_MERMAID_EDGES = {"next": "-->", "said": "-.->", "fork": "==>", "undoes": "-.-"}


def _mermaid(item: _Node | _Edge) -> str:
    if isinstance(item, _Edge):
        return f"    {item.tail} {_MERMAID_EDGES[item.kind]} {item.head}"
    opening, closing = _MERMAID_SHAPES[item.shape]
    css = f":::{item.style}" if item.style else ""
    return f"    {item.name}{opening}{'<br/>'.join(map(_m, item.lines))}{closing}{css}"


def to_mermaid(sagas: Iterable[GraphSaga]) -> str:
    lines = ["flowchart TD"]
    for name, (fill, stroke, width, dash) in _STYLE.items():
        dashing = f",stroke-dasharray:{dash}" if dash else ""
        lines.append(f"  classDef {name} fill:{fill},stroke:{stroke},stroke-width:{width}px{dashing}")
    for n, saga in enumerate(sagas):
        p = f"s{n}"
        title = f"saga {saga.name or ''} ({saga.saga_id[:8]})"
        lines.append(f'  subgraph {p}["{_m(title)}"]')
        lines.append("    direction TB")
        lines.extend(map(_mermaid, _drawing(saga, p)))
        lines.append("  end")
    return "\n".join(lines) + "\n"


# -- Graphviz DOT ---------------------------------------------------------------------------


def _d(text: str) -> str:
    """Text safe inside a quoted DOT label, and inert: Graphviz then draws the escapes as written."""
    return inert(text).replace("\\", "\\\\").replace('"', '\\"')


def _dot_style(name: str) -> str:
    fill, stroke, width, dash = _STYLE[name]
    style = "filled,dashed" if dash else "filled"
    return f'style="{style}", fillcolor="{fill}", color="{stroke}", penwidth={width}'


_DOT_BREAK = "\\n"  # a line break inside a DOT label: backslash, n
_DOT_SHAPES = {"step": "", "note": "shape=note, ", "fork": "shape=hexagon, ", "end": "shape=oval, "}
_DOT_EDGES = {"next": "", "said": " [style=dotted]", "fork": " [penwidth=2]", "undoes": " [style=dotted, arrowhead=none]"}


def _dot(item: _Node | _Edge) -> str:
    if isinstance(item, _Edge):
        return f"    {item.tail} -> {item.head}{_DOT_EDGES[item.kind]};"
    style = f", {_dot_style(item.style)}" if item.style else ""
    return f'    {item.name} [{_DOT_SHAPES[item.shape]}label="{_DOT_BREAK.join(map(_d, item.lines))}"{style}];'


def to_dot(sagas: Iterable[GraphSaga]) -> str:
    lines = ["digraph sagas {", '  rankdir=TB; node [shape=box, fontname="Helvetica"];']
    for n, saga in enumerate(sagas):
        p = f"s{n}"
        lines.append(f'  subgraph cluster_{n} {{ label="{_d(f"saga {saga.name} ({saga.saga_id[:8]})")}";')
        lines.extend(map(_dot, _drawing(saga, p)))
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
