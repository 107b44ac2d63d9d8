"""``viz --kind fleet``: every saga of a log as a bar on real elapsed time.

Which sagas ran at once, which overlapped, and where on the wall clock the
rollbacks landed. A rolled-back saga's bar is striped as well as coloured, and
every bar is followed by its verdict in words, so the picture reads the same in
greyscale and to a red/green colour-blind eye. The bars are the model's
(``ui._model``), so a rollback the model calls NOT CLEAN is never drawn as clean.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_saga.ui._model import GraphSaga
from agent_saga.ui._svg import Svg, fit, style_attrs
from agent_saga.ui._theme import LIGHT, Theme

__all__ = ["MAX_ROWS", "render_fleet"]

#: Sagas drawn at most; the header still counts every saga of the log.
MAX_ROWS = 400
WIDTH = 1000
_LABEL_W = 230
_VERDICT_W = 230
_ROW = 24
_BAR = 14


def _duration(us: float) -> str:
    if us < 1_000:
        return f"{us:.0f} us"
    if us < 1_000_000:
        return f"{us / 1_000:.3g} ms"
    return f"{us / 1_000_000:.3g} s"


def _ticks(span: int) -> list[int]:
    """Round tick positions (microseconds from the start) for an axis ``span`` long."""
    raw = span / 5
    step = 1
    while step * 10 <= raw:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= raw:
            step *= factor
            break
    return list(range(0, span + 1, step))


def _most_at_once(sagas: Sequence[GraphSaga]) -> int:
    events = sorted([(s.started_us, 1) for s in sagas] + [(s.ended_us, -1) for s in sagas],
                    key=lambda e: (e[0], -e[1]))
    most = now = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def _verdict_words(saga: GraphSaga) -> str:
    if saga.status == "completed":
        return "completed"
    if saga.status == "open":
        return "OPEN - no end record"
    return "rolled back, clean" if saga.clean else "rolled back, NOT CLEAN"


def render_fleet(sagas: Sequence[GraphSaga], theme: Theme = LIGHT) -> str:
    """The fleet picture of ``sagas`` (as ``ui._model.reconstruct`` returns them)."""
    timed = sorted((s for s in sagas if s.started_us), key=lambda s: (s.started_us, s.saga_id))
    start = min((s.started_us for s in timed), default=0)
    end = max((s.ended_us for s in timed), default=0)
    span = max(end - start, 1)
    rolled = [s for s in timed if s.status == "rolled back"]
    dirty = sum(1 for s in rolled if not s.clean)
    summary = (
        f"{len(timed)} saga(s) over {_duration(span)}: "
        f"{sum(s.status == 'completed' for s in timed)} completed, {len(rolled)} rolled back "
        f"({len(rolled) - dirty} clean, {dirty} NOT CLEAN), {sum(s.status == 'open' for s in timed)} open; "
        f"at most {_most_at_once(timed)} at once"
    )
    svg = Svg(theme, "fleet: every saga on real elapsed time", summary, kind="fleet")
    svg.text(svg.root, 16, 28, "fleet: every saga on real elapsed time", 18, **{"class": "b"})
    svg.text(svg.root, 16, 48, fit(summary, WIDTH - 32, 12), 12, **{"class": "muted"})

    x0, x1 = float(_LABEL_W), float(WIDTH - _VERDICT_W - 10)

    def x(us: int) -> float:
        return x0 + (x1 - x0) * (us - start) / span

    top = 78.0
    drawn = timed[:MAX_ROWS]
    bottom = top + len(drawn) * _ROW
    for tick in _ticks(span):
        svg.line(svg.root, x(start + tick), top - 8, x(start + tick), bottom, stroke=theme.rule,
                 stroke_width="0.5", stroke_dasharray="2 3")
        svg.text(svg.root, x(start + tick), top - 12, f"+{_duration(tick)}", 10, text_anchor="middle",
                 **{"class": "muted"})
    stripes = {
        "clean": svg.hatch("hatch-clean", theme.looks["clean"].fill, theme.looks["clean"].stroke),
        "dirty": svg.hatch("hatch-dirty", theme.looks["dirty"].fill, theme.looks["dirty"].stroke),
        "open": svg.hatch("hatch-open", theme.looks["open"].fill, theme.looks["open"].stroke),
    }
    for n, saga in enumerate(drawn):
        y = top + n * _ROW
        row = svg.group(svg.root, data_saga=saga.saga_id, data_status=saga.status,
                        data_verdict=saga.verdict_kind)
        steps = ", ".join(f"{s.index}. {s.tool}" for s in saga.steps) or "no steps"
        svg.tooltip(row, f"{saga.name or '(unnamed)'} {saga.saga_id}: {saga.verdict}; steps: {steps}")
        svg.text(row, 16, y + 12, fit(f"{saga.name or '(unnamed)'} {saga.saga_id[:8]}", _LABEL_W - 24, 12), 12)
        left, right = x(saga.started_us), max(x(saga.ended_us), x(saga.started_us) + 3)
        kind = saga.verdict_kind
        look = theme.looks[kind]
        attrs = style_attrs(look)
        if saga.status == "rolled back" or saga.rollback_us is not None:  # any unwind, finished or not
            attrs["fill"] = stripes[kind]
            attrs["data-hatched"] = "true"
        svg.rect(row, left, y + 1, right - left, _BAR, **attrs)
        if saga.rollback_us is not None:  # where the unwind began
            svg.line(row, x(saga.rollback_us), y - 2, x(saga.rollback_us), y + _BAR + 4, stroke=theme.ink,
                     stroke_width="1.5")
        svg.text(row, x1 + 12, y + 12,
                 fit(f"{_verdict_words(saga)} {_duration(saga.ended_us - saga.started_us)}", _VERDICT_W, 11), 11)
    y = bottom + 16
    if len(timed) > len(drawn):
        svg.text(svg.root, 16, y, f"... and {len(timed) - len(drawn)} more saga(s), not drawn (the header "
                 "counts them)", 12, **{"class": "b"})
        y += 20
    svg.text(svg.root, 16, y + 4, "striped: the saga unwound (| marks where); solid: it completed", 11,
             **{"class": "muted"})
    return svg.finish(WIDTH, y + 20)
