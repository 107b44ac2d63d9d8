"""``viz --kind chain``: the hash chain, verified while it is drawn.

Every record is checked on its own (its header against its hash, its body against
its digest) and against the record before it (``prev``, ``seq``); a link that does
not hold is drawn red and labelled BROKEN with the reason. The header is the
verdict of ``audit._verify`` itself, the same as ``agent-saga verify`` prints, and
the record that verdict names is always drawn BROKEN, so the picture can never show
intact what the verifier rejects. Unlike the verifier, which stops at the first
break, the picture goes on and shows every one.

A long log is cropped to fit, but never at a break: the first and last records and
every broken one (with its neighbours) stay, and each elided run says how many
records it hides and that all of them verified. A log written with ``chain=False``
is said to be unchained, never intact, and a partly chained one says so too.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# The verifier's own checker and per-record rule: one implementation of the chain rule, not two.
from agent_saga.log.chain import Attestations, ChainChecker, VerifyReport, check_record, read_line
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import GENESIS, Record
from agent_saga.ui._svg import Svg, fit, style_attrs
from agent_saga.ui._theme import LIGHT, Theme

__all__ = ["MAX_ROWS", "Link", "check_links", "render_chain", "render_chain_bytes"]

#: Records drawn at most before the picture is cropped (breaks are always kept).
MAX_ROWS = 80
_EDGE = 8  # records kept at each end of a cropped log
WIDTH = 900
_ROW = 20

LinkStatus = Literal["ok", "redacted", "compacted", "unchained", "broken"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One non-blank line of a log: its record, or None and why it is not one."""

    line: int
    record: Record | None
    error: str = ""


def read_entries(data: bytes) -> tuple[list[Entry], list[str]]:
    """Every line of a log's bytes, with the verifier's final-line rule (a torn tail is set aside)."""
    entries: list[Entry] = []
    notes: list[str] = []
    for line in iter_lines(io.BytesIO(data)):
        if not line.raw.strip():
            continue
        if not line.terminated and is_torn(line.raw):
            notes.append(f"a torn final line ({len(line.raw)} bytes, no newline) was ignored")
            break
        record, error = read_line(line)
        entries.append(Entry(line.number, record, error))
    return entries, notes


def verify_entries(entries: Sequence[Entry], notes: Sequence[str] = ()) -> VerifyReport:
    """The verifier's verdict over ``entries`` (the same checker ``agent-saga verify`` runs)."""
    checker = ChainChecker(Attestations.of(e.record for e in entries if e.record is not None))
    for entry in entries:
        if checker.broken:
            checker.count(entry.line)
        else:
            checker.feed(entry.line, entry.record, entry.error)
    return checker.report(notes)


@dataclass(frozen=True, slots=True)
class Link:
    """One record and the link from the record before it."""

    line: int
    seq: int | None
    type: str
    saga: str
    hash: str
    status: LinkStatus
    reason: str = ""  # why it is broken, or what the gap before it was
    what: str = ""  # the step and tool the record is about, when the log says


def _judge(
    r: Record, seq: int | None, prev_seq: int, prev_hash: str | None, compacted: Sequence[tuple[int, int]]
) -> tuple[LinkStatus, str]:
    if seq is None or seq < 1:
        return "broken", f"no valid seq (got {r.get('seq')!r})"
    if seq <= prev_seq:
        return "broken", f"seq {seq} does not follow seq {prev_seq}: reordered, duplicated or inserted"
    if "hash" not in r:
        if any(k in r for k in ("digest", "prev", "salt")):
            return "broken", "it has chain fields but its hash was removed"
        return "unchained", ""
    problem = check_record(r)
    if problem:
        return "broken", problem
    if seq != prev_seq + 1:
        first, last = prev_seq + 1, seq - 1
        if any(a <= first and last <= b for a, b in compacted):
            return "compacted", f"seq {first}..{last} compacted away (attested)"
        return "broken", f"seq {first}..{last} missing and no compaction attests it"
    expected = prev_hash if prev_seq else GENESIS  # None: the record before carries no chain
    if expected is not None and r.get("prev") != expected:
        return "broken", f"prev does not link to {f'seq {prev_seq}' if prev_seq else 'the start of the log'}"
    return ("redacted" if "body" not in r and "enc" not in r else "ok"), ""


def check_links(entries: Sequence[Entry], report: VerifyReport) -> list[Link]:
    """The status of every record's link; ``report`` is ``verify_entries`` over the same entries."""
    links: list[Link] = []
    prev_seq = 0
    prev_hash: str | None = None
    tools: dict[tuple[str, int], str] = {}  # only intents (and reversible commits) name the tool
    for entry in entries:
        r = entry.record
        if r is None:
            links.append(Link(entry.line, None, "?", "", "", "broken", f"not a log record: {entry.error}"))
            prev_hash = None
            continue
        raw = r.get("seq")
        seq = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        own = r.get("hash") if isinstance(r.get("hash"), str) else None
        status, reason = _judge(r, seq, prev_seq, prev_hash, report.compacted)
        saga, step, body = str(r.get("saga", "")), r.get("step"), r.get("body")
        what = ""
        if isinstance(step, int):
            if isinstance(body, dict) and isinstance(body.get("tool"), str):
                tools[saga, step] = body["tool"]
            what = f"step {step} {tools.get((saga, step), '')}".rstrip()
        links.append(Link(entry.line, seq, str(r.get("type", "?")), saga, own or "", status, reason, what))
        if seq is not None:
            prev_seq = max(prev_seq, seq)
        prev_hash = own
    if report.status == "broken" and report.bad_line is not None:
        # The verifier's verdict is the authority: the record it names is drawn broken.
        for n, link in enumerate(links):
            if link.line == report.bad_line and link.status != "broken":
                links[n] = dataclasses.replace(link, status="broken", reason=report.reason)
    return links


def _keep(links: Sequence[Link]) -> list[bool]:
    if len(links) <= MAX_ROWS:
        return [True] * len(links)
    keep = [n < _EDGE or n >= len(links) - _EDGE for n in range(len(links))]
    for n, link in enumerate(links):
        if link.status == "broken":
            for m in (n - 1, n, n + 1):
                if 0 <= m < len(links):
                    keep[m] = True
    return keep


def _header(report: VerifyReport, links: Sequence[Link]) -> tuple[str, str]:
    broken = sum(link.status == "broken" for link in links)
    if report.status == "unchained":
        return ("chain: UNCHAINED - written with chain=False; nothing proves it was not altered",
                f"{report.records} record(s), none chained")
    if report.status == "partial":
        head = f"chain: PARTLY CHAINED - {report.label}"
    elif report.status == "broken" or broken:
        head = f"chain: {report.label}" if report.status == "broken" else "chain: BROKEN"
    else:
        head = "chain: intact - every link verified"
    counts = f"{report.records} record(s), {report.chained} chained, {broken} BROKEN link(s)" if broken else (
        f"{report.records} record(s), {report.chained} chained, every link verified")
    return head, counts


def render_chain(entries: Sequence[Entry], report: VerifyReport, theme: Theme = LIGHT) -> str:
    """The chain picture of parsed log lines, with the verifier's ``report`` over them."""
    links = check_links(entries, report)
    head, counts = _header(report, links)
    broken = [link for link in links if link.status == "broken"]
    desc = counts + "".join(f"; BROKEN at line {b.line}: {b.reason}" for b in broken)
    svg = Svg(theme, head, desc, kind="chain")
    svg.mark(data_status=report.status, data_broken=str(len(broken)))
    title_look = "broken" if broken or report.status in ("broken", "unchained", "partial") else "clean"
    svg.rect(svg.root, 12, 10, WIDTH - 24, 48, rx="5", **style_attrs(theme.looks[title_look]))
    svg.text(svg.root, 24, 31, fit(head, WIDTH - 48, 15), 15, **{"class": "b"})
    svg.text(svg.root, 24, 49, fit(counts, WIDTH - 48, 12), 12)

    keep = _keep(links)
    y = 84.0
    gutter = 34.0
    hidden: list[Link] = []

    def elide(y: float) -> float:
        if not hidden:
            return y
        kinds = sorted({h.status for h in hidden})
        what = ", ".join(f"{sum(h.status == k for h in hidden)} {k}" for k in kinds)
        first, last = hidden[0].seq, hidden[-1].seq
        svg.text(svg.root, gutter + 14, y + 13, f"... {len(hidden)} record(s) not drawn (seq {first}..{last}): "
                 f"{what}; none broken", 11, data_role="elided", **{"class": "muted"})
        hidden.clear()
        return y + _ROW

    for link, shown in zip(links, keep, strict=True):
        if not shown:
            hidden.append(link)
            continue
        y = elide(y)
        bad = link.status == "broken"
        colour = theme.looks["broken"].stroke if bad else (
            theme.rule if link.status == "unchained" else theme.looks["clean"].stroke)
        row = svg.group(svg.root, data_link=link.status, data_line=str(link.line))
        # the link from the record above: a chain segment, red and thick when it does not hold
        svg.line(row, gutter, y - _ROW + 12, gutter, y + 4, stroke=colour, stroke_width="4" if bad else "2",
                 stroke_dasharray="3 3" if link.status in ("unchained", "compacted") else "")
        if bad:
            svg.rect(row, gutter + 8, y - 1, WIDTH - gutter - 20, _ROW - 2, rx="3",
                     **style_attrs(theme.looks["broken"]))
        svg.rect(row, gutter - 5, y + 4, 10, 10, rx="2", fill=colour)
        seq = "?" if link.seq is None else str(link.seq)
        mark = {"ok": "", "redacted": " (body redacted)", "compacted": f" ({link.reason})",
                "unchained": " unchained", "broken": ""}[link.status]
        svg.text(row, gutter + 14, y + 13, fit(f"seq {seq}  {link.saga[:8]}  {link.type}  {link.what}{mark}", 430, 11), 11,
                 **{"class": "mono"})
        if bad:
            svg.text(row, gutter + 450, y + 13, fit(f"BROKEN: {link.reason}", WIDTH - gutter - 480, 11), 11,
                     **{"class": "b"})
        elif link.hash:
            svg.text(row, gutter + 450, y + 13, f"hash {link.hash[:16]}", 11, **{"class": "mono muted"})
        y += _ROW
    y = elide(y)
    if not links:
        svg.text(svg.root, gutter, y + 10, "the log is empty", 12)
        y += _ROW
    return svg.finish(WIDTH, y + 16)


def render_chain_bytes(data: bytes, theme: Theme = LIGHT) -> str:
    """The chain picture of a log file's bytes (verified here, with the verifier's notes)."""
    entries, notes = read_entries(data)
    return render_chain(entries, verify_entries(entries, notes), theme)

