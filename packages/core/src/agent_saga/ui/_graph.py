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

from collections.abc import Iterable

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


# -- Mermaid ------------------------------------------------------------------------------


def _m(text: str) -> str:
    """Text safe inside a quoted Mermaid label, and inert (control and bidi characters shown escaped)."""
    return (inert(text).replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
            .replace(">", "#gt;"))


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
        previous = None
        for step in saga.steps:
            node = f"{p}_f{step.index}"
            css = _forward_style(step)
            under = _under_line(step)
            under = f'<br/>{_m(under)}' if under else ""
            lines.append(f'    {node}["{_m(f"{step.index}. {step.tool}")}<br/>'
                         f'{_m(step.state_line)}{under}"]:::{css}')
            if previous is not None:
                lines.append(f"    {previous} --> {node}")
            previous = node
        indexes = {step.index for step in saga.steps}
        for k, said in enumerate(saga.verdicts):
            node, css = f"{p}_a{k}", "clean" if said.kind == "ok" else "dirty"
            lines.append(f'    {node}[/"{_m(short(said.label, 96))}"/]:::{css}')
            if said.after_step in indexes:
                lines.append(f"    {p}_f{said.after_step} -.-> {node}")
        if saga.status != "completed":
            fork = f"{p}_rb"
            lines.append(f'    {fork}{{{{"{_m(_fork_label(saga))}"}}}}')
            if previous is not None:
                lines.append(f"    {previous} ==> {fork}")
            chain = fork
            for step in saga.unwound:
                node = f"{p}_u{step.index}"
                outcome = str(step.outcome)
                lines.append(f'    {node}["{_m(f"undo {step.index}. {step.tool}")}<br/>'
                             f'{_m(LABELS[outcome])}"]:::{outcome}')
                lines.append(f"    {chain} --> {node}")
                lines.append(f"    {node} -.- {p}_f{step.index}")
                chain = node
            verdict = f"{p}_v"
            css = _verdict_style(saga)
            lines.append(f'    {verdict}(["{_m(saga.verdict)}"]):::{css}')
            lines.append(f"    {chain} --> {verdict}")
        elif previous is not None:
            lines.append(f'    {p}_v(["completed"]):::clean')
            lines.append(f"    {previous} --> {p}_v")
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


def to_dot(sagas: Iterable[GraphSaga]) -> str:
    lines = ["digraph sagas {", '  rankdir=TB; node [shape=box, fontname="Helvetica"];']
    for n, saga in enumerate(sagas):
        p = f"s{n}"
        lines.append(f'  subgraph cluster_{n} {{ label="{_d(f"saga {saga.name} ({saga.saga_id[:8]})")}";')
        previous = None
        for step in saga.steps:
            node = f"{p}_f{step.index}"
            css = _forward_style(step)
            label = _d(f"{step.index}. {step.tool}") + "\\n" + _d(step.state_line)
            if under := _under_line(step):
                label += "\\n" + _d(under)
            lines.append(f'    {node} [label="{label}", {_dot_style(css)}];')
            if previous is not None:
                lines.append(f"    {previous} -> {node};")
            previous = node
        indexes = {step.index for step in saga.steps}
        for k, said in enumerate(saga.verdicts):
            node, css = f"{p}_a{k}", "clean" if said.kind == "ok" else "dirty"
            lines.append(f'    {node} [shape=note, label="{_d(short(said.label, 96))}", {_dot_style(css)}];')
            if said.after_step in indexes:
                lines.append(f"    {p}_f{said.after_step} -> {node} [style=dotted];")
        if saga.status != "completed":
            fork = f"{p}_rb"
            lines.append(f'    {fork} [shape=hexagon, label="{_d(_fork_label(saga))}"];')
            if previous is not None:
                lines.append(f"    {previous} -> {fork} [penwidth=2];")
            chain = fork
            for step in saga.unwound:
                node = f"{p}_u{step.index}"
                outcome = str(step.outcome)
                label = _d(f"undo {step.index}. {step.tool}") + "\\n" + _d(LABELS[outcome])
                lines.append(f'    {node} [label="{label}", {_dot_style(outcome)}];')
                lines.append(f"    {chain} -> {node};")
                lines.append(f"    {node} -> {p}_f{step.index} [style=dotted, arrowhead=none];")
                chain = node
            css = _verdict_style(saga)
            lines.append(f'    {p}_v [shape=oval, label="{_d(saga.verdict)}", {_dot_style(css)}];')
            lines.append(f"    {chain} -> {p}_v;")
        elif previous is not None:
            lines.append(f'    {p}_v [shape=oval, label="completed", {_dot_style("clean")}];')
            lines.append(f"    {previous} -> {p}_v;")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
