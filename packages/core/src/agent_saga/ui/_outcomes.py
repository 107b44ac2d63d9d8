"""``viz --kind outcomes``: tool by outcome, over every saga of a log.

Which calls the world kept and which had to be taken back, per tool. A share is
only printed for a tool observed at least ``MIN_OBSERVATIONS`` times: below that
its cells are greyed and show the raw count, because "100% orphaned" over one call
means nothing and reads as though it meant everything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import get_args

from agent_saga.ui._model import FinalOutcome, GraphSaga
from agent_saga.ui._svg import Svg, fit, style_attrs
from agent_saga.ui._theme import LIGHT, Look, Theme

__all__ = ["COLUMNS", "MIN_OBSERVATIONS", "count_outcomes", "render_outcomes"]

MIN_OBSERVATIONS = 5
MAX_ROWS = 200
COLUMNS: tuple[FinalOutcome, ...] = get_args(FinalOutcome)
# Column headings, and the look of a cell with a share to show.
_HEAD: Mapping[str, tuple[str, str]] = {
    "committed": ("committed", "completed"),
    "compensated": ("compensated", "compensated"),
    "kept": ("kept", "kept"),
    "failed": ("FAILED", "failed"),
    "orphaned": ("ORPHANED", "orphaned"),
    "unresolved": ("UNRESOLVED", "unresolved"),
    "refused": ("refused", "refused"),
    "not applied": ("not applied", "refused"),
    "in flight": ("in flight", "open"),
}
_LABEL_W = 290
_COL = 92
_ROW = 30


def count_outcomes(sagas: Sequence[GraphSaga]) -> dict[str, dict[str, int]]:
    """tool -> outcome -> how many of its calls ended there."""
    table: dict[str, dict[str, int]] = {}
    for saga in sagas:
        for step in saga.steps:
            row = table.setdefault(step.tool, {})
            final = step.final(saga.status)
            row[final] = row.get(final, 0) + 1
    return table


def render_outcomes(sagas: Sequence[GraphSaga], theme: Theme = LIGHT) -> str:
    table = count_outcomes(sagas)
    tools = sorted(table, key=lambda t: (-sum(table[t].values()), t))
    calls = sum(sum(r.values()) for r in table.values())
    sparse = sum(1 for t in tools if sum(table[t].values()) < MIN_OBSERVATIONS)
    summary = (f"{calls} call(s) of {len(tools)} tool(s) in {len(sagas)} saga(s); {sparse} tool(s) seen fewer "
               f"than {MIN_OBSERVATIONS} times are greyed with raw counts")
    svg = Svg(theme, "outcomes: tool by outcome", summary, kind="outcomes")
    svg.text(svg.root, 16, 28, "outcomes: tool by outcome", 18, **{"class": "b"})
    svg.text(svg.root, 16, 48, fit(summary, _LABEL_W + _COL * len(COLUMNS) - 16, 12), 12, **{"class": "muted"})
    width = _LABEL_W + _COL * len(COLUMNS) + 16
    top = 66.0
    for c, column in enumerate(COLUMNS):
        svg.text(svg.root, _LABEL_W + c * _COL + _COL / 2, top + 14, _HEAD[column][0], 11, text_anchor="middle",
                 **{"class": "b"})
    y = top + 26
    for tool in tools[:MAX_ROWS]:
        counts = table[tool]
        total = sum(counts.values())
        enough = total >= MIN_OBSERVATIONS
        row = svg.group(svg.root, data_tool=tool, data_calls=str(total), data_sparse=str(not enough).lower())
        svg.text(row, 16, y + 19, fit(tool, _LABEL_W - 90, 12), 12)
        svg.text(row, _LABEL_W - 10, y + 19, f"{total} call(s)", 11, text_anchor="end", **{"class": "muted"})
        for c, column in enumerate(COLUMNS):
            n = counts.get(column, 0)
            x = _LABEL_W + c * _COL
            cell = svg.group(row, data_outcome=column, data_count=str(n))
            if not enough:
                look = theme.looks["sparse"]
                text = str(n) if n else "-"
            else:
                look = theme.looks[_HEAD[column][1]] if n else Look(theme.background, theme.rule, 1, "")
                text = f"{round(100 * n / total)}% ({n})" if n else "-"
            svg.rect(cell, x + 2, y + 2, _COL - 4, _ROW - 4, rx="3", **style_attrs(look))
            svg.text(cell, x + _COL / 2, y + 19, text, 11, text_anchor="middle",
                     **({"class": "muted"} if not enough or not n else {}))
        y += _ROW
    if len(tools) > MAX_ROWS:
        svg.text(svg.root, 16, y + 16, f"... and {len(tools) - MAX_ROWS} more tool(s), not drawn", 12,
                 **{"class": "b"})
        y += 24
    if not tools:
        svg.text(svg.root, 16, y + 16, "no tool calls in this log", 12)
        y += 24
    svg.text(svg.root, 16, y + 20, f"a share is shown only for a tool seen at least {MIN_OBSERVATIONS} times; "
             "'-' means none", 11, **{"class": "muted"})
    return svg.finish(width, y + 34)
