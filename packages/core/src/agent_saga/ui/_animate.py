"""``agent-saga animate``: one saga's run and unwind as a self-contained animated SVG.

The forward steps build downward; then the compensations fire back up beside them,
newest first, one at a time; a verdict banner closes it. Motion is CSS keyframes
only: no script, no external reference, so the file renders inside ``<img>``, a
GitHub comment or a PDF, and under a strict Content-Security-Policy. The elements'
own style is the final frame, and a ``prefers-reduced-motion`` block switches the
animation off, so a viewer who asked for less motion (or a renderer without CSS
animation) sees the final frame at once.

Drawn from ``ui._model`` (the recovery fold), like ``graph``: the two cannot disagree,
and the banner is the model's verdict, which is never clean over an orphaned, failed
or unresolved step. Those three each have their own colour, border, label and count.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from agent_saga.ui._model import LABELS, GraphSaga, GraphStep
from agent_saga.ui._svg import CHAR_WIDTH, Svg, fit, style_attrs
from agent_saga.ui._theme import LIGHT, Theme

__all__ = ["OUTCOME_ORDER", "render_animation"]

#: The outcomes the verdict counts, always all of them, in this order.
OUTCOME_ORDER = ("compensated", "kept", "failed", "orphaned", "unresolved")

WIDTH = 780
_PAD = 24
_ROW = 48
_BOX = 38
_FWD_W = 330
_UNDO_X = 404
_UNDO_W = WIDTH - _UNDO_X - _PAD

# The script, in seconds: each forward step, the fork, each compensation, the verdict, the hold.
_FIRST = 0.4
_STEP = 0.7
_FORK_PAUSE = 0.9
_UNDO = 1.1
_VERDICT_PAUSE = 0.9
_HOLD = 4.0
_FADE = 0.35


class _Script:
    """Per-element keyframes: element n appears (or, for a pulse, flashes) at a time."""

    def __init__(self) -> None:
        self.cues: list[tuple[str, float, bool]] = []  # (class, time, pulse)

    def at(self, el: ET.Element, time: float, *, pulse: bool = False) -> None:
        name = f"k{len(self.cues)}"
        el.set("class", f"{el.get('class', '')} a {name}".strip())
        self.cues.append((name, time, pulse))

    def css(self, total: float, loop: bool) -> str:
        def pct(t: float) -> str:
            return f"{min(100.0, 100.0 * t / total):.2f}".rstrip("0").rstrip(".")

        runs = "infinite" if loop else "1 forwards"
        parts = []
        for name, t, pulse in self.cues:
            if pulse:
                frames = (f"0%,{pct(t)}%{{opacity:0}}{pct(t + _FADE / 2)}%{{opacity:1}}"
                          f"{pct(t + _UNDO - _FADE)}%,100%{{opacity:0}}")
            else:
                frames = f"0%,{pct(t)}%{{opacity:0}}{pct(t + _FADE)}%,100%{{opacity:1}}"
            parts.append(f"@keyframes {name}{{{frames}}}.{name}{{animation:{name} {total:.2f}s linear {runs}}}")
        # The final frame is every element's own style; less motion means that frame, at once.
        parts.append("@media (prefers-reduced-motion: reduce){.a{animation:none!important}}")
        return "".join(parts)


def _fork_text(saga: GraphSaga) -> str:
    if saga.status == "open" and not saga.unwound:
        return "the log ends here: no rollback and no end record"
    head = "rollback" if saga.status == "rolled back" else "rollback started, never finished"
    by = " (by the recovery daemon)" if saga.recovered else ""
    return f"{head}{by}: {saga.cause}" if saga.cause else f"{head}{by}"


def _forward(svg: Svg, parent: ET.Element, step: GraphStep, y: float) -> ET.Element:
    look = svg.theme.looks["refused" if step.state in ("refused", "not-applied") else "forward"]
    g = svg.group(parent, data_step=str(step.index))
    svg.rect(g, _PAD, y, _FWD_W, _BOX, rx="5", **style_attrs(look))
    svg.text(g, _PAD + 10, y + 16, fit(f"{step.index}. {step.tool}", _FWD_W - 20, 13), 13, **{"class": "b"})
    svg.text(g, _PAD + 10, y + 31, fit(f"{step.semantics} - {step.state}", _FWD_W - 20, 11), 11,
             **{"class": "muted"})
    return g


def _undo(svg: Svg, parent: ET.Element, step: GraphStep, y: float, order: int) -> tuple[ET.Element, ET.Element]:
    outcome = str(step.outcome)
    look = svg.theme.looks[outcome]
    g = svg.group(parent, data_step=str(step.index), data_outcome=outcome, data_order=str(order))
    # the dotted tie back to the step it undoes
    svg.line(g, _PAD + _FWD_W, y + _BOX / 2, _UNDO_X, y + _BOX / 2, stroke=svg.theme.rule,
             stroke_dasharray="2 3")
    svg.rect(g, _UNDO_X, y, _UNDO_W, _BOX, rx="5", **style_attrs(look))
    svg.text(g, _UNDO_X + 10, y + 16, fit(f"undo {step.index}. {step.tool}", _UNDO_W - 20, 12.5), 12.5,
             **{"class": "b"})
    detail = f"{LABELS[outcome]}: {step.undo}" if step.undo else LABELS[outcome]
    svg.text(g, _UNDO_X + 10, y + 31, fit(detail, _UNDO_W - 20, 11), 11)
    pulse = svg.rect(parent, _UNDO_X - 4, y - 4, _UNDO_W + 8, _BOX + 8, rx="8", fill="none",
                     stroke=look.stroke, stroke_width="3", opacity="0")
    return g, pulse


def render_animation(saga: GraphSaga, theme: Theme = LIGHT, *, loop: bool = True) -> str:
    """The animated SVG of one saga (deterministic: one model, one theme, the same bytes)."""
    title = f"saga {saga.name or '(unnamed)'} ({saga.saga_id[:8]}): {saga.verdict}"
    tally = saga.tally()
    counts = " - ".join(f"{tally.get(o, 0)} {o}" for o in OUTCOME_ORDER)
    steps_text = ", ".join(f"{s.index}. {s.tool}" for s in saga.steps) or "no steps"
    undone = ", ".join(f"{s.index}. {s.tool} {s.outcome}" for s in saga.unwound)
    desc = f"Steps: {steps_text}." + (f" Undone newest first: {undone}." if undone else "") + f" {counts}."
    svg = Svg(theme, title, desc, kind="animate")
    svg.mark(data_saga=saga.saga_id, data_verdict=saga.verdict_kind)
    script = _Script()

    svg.text(svg.root, _PAD, 30, fit(f"saga {saga.name or '(unnamed)'}  {saga.saga_id[:8]}", WIDTH - 2 * _PAD, 18),
             18, **{"class": "b"})
    svg.text(svg.root, _PAD, 52, "forward, as it ran", 12, **{"class": "muted"})
    svg.text(svg.root, _UNDO_X, 52, "undo, newest first", 12, **{"class": "muted"})

    y0 = 66.0
    rows = {step.index: y0 + n * _ROW for n, step in enumerate(saga.steps)}
    t = _FIRST
    for n, step in enumerate(saga.steps):
        g = _forward(svg, svg.root, step, rows[step.index])
        if n:  # the path builds down: each step brings its link to the one above
            svg.line(g, _PAD + 24, rows[step.index] - _ROW + _BOX, _PAD + 24, rows[step.index],
                     stroke=theme.rule, stroke_width="2")
        script.at(g, t)
        t += _STEP
    y = y0 + len(saga.steps) * _ROW + 6

    if saga.status != "completed":
        t += _FORK_PAUSE - _STEP
        fork_look = theme.looks[saga.verdict_kind]
        fork = svg.group(svg.root, data_role="fork")
        svg.path(fork, f"M{_PAD + 12} {y} H{WIDTH - _PAD - 12} l12 17 l-12 17 H{_PAD + 12} l-12 -17 Z",
                 fill=theme.background, stroke=fork_look.stroke, stroke_width="2")
        svg.text(fork, _PAD + 20, y + 22, fit(_fork_text(saga), WIDTH - 2 * _PAD - 40, 12.5), 12.5)
        script.at(fork, t)
        t += _FADE + 0.4
        for order, step in enumerate(saga.unwound, start=1):
            top = rows[step.index]
            # the compensation fires up the right-hand column, from the fork to its step
            arrow = svg.line(svg.root, WIDTH - _PAD - 10, y, WIDTH - _PAD - 10, top + _BOX, stroke=theme.rule,
                             stroke_width="2", data_fire=str(step.index))
            script.at(arrow, t)
            g, pulse = _undo(svg, svg.root, step, top, order)
            script.at(g, t + 0.25)
            script.at(pulse, t + 0.25, pulse=True)
            t += _UNDO
        y += 34 + 14
        t += _VERDICT_PAUSE - _UNDO + _FADE
    else:
        t += _VERDICT_PAUSE - _STEP

    look = theme.looks[saga.verdict_kind]
    banner = svg.group(svg.root, data_role="verdict")
    svg.rect(banner, _PAD, y, WIDTH - 2 * _PAD, 54, rx="6", **style_attrs(look))
    svg.text(banner, _PAD + 14, y + 23, fit(saga.verdict, WIDTH - 2 * _PAD - 28, 16), 16, **{"class": "b"})
    svg.text(banner, _PAD + 14, y + 43, counts if saga.status != "completed" else
             f"{len(saga.steps)} step(s), nothing to undo", 12)
    script.at(banner, t)
    y += 54 + 18

    # The legend: every outcome's look and words, whether or not it occurs here.
    x = float(_PAD)
    for outcome in OUTCOME_ORDER:
        svg.rect(svg.root, x, y, 16, 12, **style_attrs(theme.looks[outcome]))
        label = outcome.upper() if outcome in ("failed", "orphaned", "unresolved") else outcome
        svg.text(svg.root, x + 21, y + 11, label, 11)
        x += 21 + len(label) * 11 * CHAR_WIDTH + 18
    y += 30

    total = t + _FADE + _HOLD
    svg.css(script.css(total, loop))
    return svg.finish(WIDTH, y)
