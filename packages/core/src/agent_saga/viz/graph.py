"""Draw what a log says happened: each saga's steps, and the fork where it unwound.

Both formats (Mermaid and Graphviz DOT) are rendered from one model built from
``recovery.fold``, the same reconstruction the recovery daemon acts on, so a
drawing cannot disagree with what recovery would do.

The three outcomes that matter are three different shapes *and* colours *and*
words, so they survive greyscale and colour blindness: compensated (solid,
green), COMPENSATION FAILED - needs a human (heavy red border), ORPHANED - no undo
exists (dashed orange). A verdict node closes every unwind; it says clean only
when every step that may have landed was undone or needed no undo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from agent_saga.recovery.fold import SagaView, StepView

__all__ = ["GraphSaga", "GraphStep", "build", "to_dot", "to_mermaid"]

Outcome = Literal["compensated", "failed", "orphaned", "unresolved", "kept"]

_LABELS: Mapping[str, str] = {
    "compensated": "compensated",
    "failed": "COMPENSATION FAILED - needs a human",
    "orphaned": "ORPHANED - no undo exists",
    "unresolved": "UNRESOLVED - not undone",
    "kept": "kept - nothing to undo",
}
# fill, border, border width, dash pattern ("" = solid)
_STYLE: Mapping[str, tuple[str, str, int, str]] = {
    "compensated": ("#d8f3dc", "#1b5e20", 2, ""),
    "failed": ("#ffd6d6", "#b71c1c", 4, ""),
    "orphaned": ("#ffe8cc", "#e65100", 2, "6 3"),
    "unresolved": ("#eeeeee", "#424242", 2, "2 2"),
    "kept": ("#f5f5f5", "#9e9e9e", 1, ""),
    "forward": ("#e3f2fd", "#0d47a1", 1, ""),
    "refused": ("#fafafa", "#757575", 1, "4 2"),
    "clean": ("#c8e6c9", "#1b5e20", 3, ""),
    "dirty": ("#ffcdd2", "#b71c1c", 4, ""),
    "open": ("#fff9c4", "#f57f17", 3, "6 3"),
}


def _short(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class GraphStep:
    index: int
    tool: str
    semantics: str
    state: str  # committed | unknown | in-flight | not-applied | refused
    outcome: Outcome | None  # None: the saga did not unwind this step (or did not unwind)


@dataclass(frozen=True, slots=True)
class GraphSaga:
    saga_id: str
    name: str
    status: Literal["completed", "rolled back", "open"]
    cause: str
    steps: tuple[GraphStep, ...]

    @property
    def unwound(self) -> tuple[GraphStep, ...]:
        """The steps the rollback dealt with, newest first."""
        return tuple(s for s in sorted(self.steps, key=lambda s: -s.index) if s.outcome is not None)

    @property
    def clean(self) -> bool:
        return self.status == "rolled back" and all(s.outcome in ("compensated", "kept") for s in self.unwound)

    @property
    def verdict(self) -> str:
        if self.status == "completed":
            return "completed"
        if self.status == "open":
            pending = sum(1 for s in self.steps if s.state in ("committed", "unknown", "in-flight"))
            return f"OPEN - no end record ({pending} effect(s) may be standing)"
        if self.clean:
            return "rollback clean"
        counts: dict[str, int] = {}
        for s in self.unwound:
            if s.outcome not in ("compensated", "kept"):
                counts[str(s.outcome)] = counts.get(str(s.outcome), 0) + 1
        detail = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
        return f"rollback NOT CLEAN: {detail}"


def _outcome(step: StepView, unwinding: bool) -> Outcome | None:
    if not step.applied or not unwinding:
        return None
    if step.settled in ("compensated", "orphaned", "unresolved", "kept"):
        return step.settled  # type: ignore[return-value]
    if step.compensation_failed:
        return "failed"
    return "unresolved"  # the unwind reached no verdict on it (yet)


def build(views: Iterable[SagaView], causes: Mapping[str, str] | None = None) -> list[GraphSaga]:
    """The drawable model of each saga, in log order."""
    sagas = []
    for view in views:
        if not view.started:
            continue
        unwinding = view.rollback_started or view.ended == "SAGA_ROLLED_BACK"
        status: Literal["completed", "rolled back", "open"] = (
            "completed" if view.ended == "SAGA_COMPLETED"
            else "rolled back" if view.ended == "SAGA_ROLLED_BACK" else "open"
        )
        steps = tuple(
            GraphStep(s.index, s.tool or "?", s.semantics or "?", s.state, _outcome(s, unwinding))
            for s in (view.steps[i] for i in sorted(view.steps))
        )
        sagas.append(GraphSaga(view.saga_id, view.name, status, (causes or {}).get(view.saga_id, ""), steps))
    return sagas


# What both renderers decide the same way.


def _fork_label(saga: GraphSaga) -> str:
    if saga.cause:
        return f"rollback: {_short(saga.cause)}"
    return "rollback" if saga.status == "rolled back" else "process stopped here"


def _forward_style(step: GraphStep) -> str:
    return "refused" if step.state in ("refused", "not-applied") else "forward"


def _verdict_style(saga: GraphSaga) -> str:
    return "clean" if saga.clean else ("open" if saga.status == "open" else "dirty")


# -- Mermaid ------------------------------------------------------------------------------


def _m(text: str) -> str:
    """Text safe inside a quoted Mermaid label."""
    return (text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
            .replace(">", "#gt;").replace("\n", " "))


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
            lines.append(f'    {node}["{_m(f"{step.index}. {step.tool}")}<br/>'
                         f'{_m(f"{step.semantics} - {step.state}")}"]:::{css}')
            if previous is not None:
                lines.append(f"    {previous} --> {node}")
            previous = node
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
                             f'{_m(_LABELS[outcome])}"]:::{outcome}')
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
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


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
            label = _d(f"{step.index}. {step.tool}") + "\\n" + _d(f"{step.semantics} - {step.state}")
            lines.append(f'    {node} [label="{label}", {_dot_style(css)}];')
            if previous is not None:
                lines.append(f"    {previous} -> {node};")
            previous = node
        if saga.status != "completed":
            fork = f"{p}_rb"
            lines.append(f'    {fork} [shape=hexagon, label="{_d(_fork_label(saga))}"];')
            if previous is not None:
                lines.append(f"    {previous} -> {fork} [penwidth=2];")
            chain = fork
            for step in saga.unwound:
                node = f"{p}_u{step.index}"
                outcome = str(step.outcome)
                label = _d(f"undo {step.index}. {step.tool}") + "\\n" + _d(_LABELS[outcome])
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
