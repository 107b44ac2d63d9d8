"""Grounded answers: every claim of an answer wears its evidence or a label.

``ground(answer, broker)`` splits an answer into claims (sentences), reads the
citations each one carries (``[s1]``, ``[s1, s2]``: ids of summaries admitted to a
:class:`~agent_saga.runtime.ContextBroker`) and checks them *now*, against
the broker's documents, never against what the model says about them:

* ``VERIFIED``: every cited summary is live, each of its receipts still resolves
  (the span's SHA-256 matches), every direct quote of the claim is in those spans,
  every number of the claim is in them (by value, with the unit and any scale or exponent
  it is written with), and the optional ``entails``
  hook did not say no;
* ``UNCITED``: the claim cites nothing; it is the model's own assertion;
* ``BROKEN_CITATION``: a cited id was never admitted, was evicted (the eviction's
  reason is in the verdict) or has a receipt that stopped resolving (the document
  drifted or was evicted);
* ``BROKEN_QUOTE``: a direct quote that is not in the cited spans: a valid
  citation does not cover an invented quote;
* ``UNSUPPORTED``: a number of the claim is in none of the cited spans, or the
  ``entails(claim, sources)`` hook returned False (None: no opinion).

The verdict is data about agent text: ``format_annotated`` shows that text through
:func:`agent_saga.inert.inert`, and the ANSWER_GROUNDED record (written in a saga,
or to ``wal=``) holds claims, statuses, reasons and receipts, never a document's
text.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_saga.context import current_saga
from agent_saga.ids import new_saga_id
from agent_saga.inert import clip, inert
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument
from agent_saga.log.encodable import encodable
from agent_saga.log.records import RecordType
from agent_saga.runtime._broker import ContextBroker, Receipt, ReceiptBroken
from agent_saga.runtime._matching import quantities_in, quantity_in, quotes_in

__all__ = [
    "Claim",
    "ClaimStatus",
    "Entails",
    "GroundingReport",
    "ground",
    "split_claims",
]


class ClaimStatus(enum.StrEnum):
    """What one claim of an answer could prove (a str: compares equal to its name)."""

    VERIFIED = "VERIFIED"
    UNCITED = "UNCITED"
    BROKEN_CITATION = "BROKEN_CITATION"
    BROKEN_QUOTE = "BROKEN_QUOTE"
    UNSUPPORTED = "UNSUPPORTED"


#: ``entails(claim, sources)``: True (supported), False (not) or None (no opinion).
Entails = Callable[[str, Sequence[str]], "bool | None"]

# A citation: [id] or [id, id, ...]; an id is a word of letters, digits and _ . : # -
# (a bracketed phrase with spaces, "[sic]" aside, is prose, not a citation).
_ID = r"[A-Za-z0-9][A-Za-z0-9_.:#\-]*"
_CITATION = re.compile(rf"\[\s*({_ID}(?:\s*,\s*{_ID})*)\s*\]")
_CITATIONS_AHEAD = re.compile(rf"(?:\s*{_CITATION.pattern})+")
# Words that end in a period without ending the sentence.
_ABBREVIATIONS = frozenset((
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "e.g", "i.e", "cf", "al", "inc", "ltd",
    "corp", "dept", "approx", "capt", "lt", "sgt", "gen", "rev",
))
# ... and words that do so before a number ("Fig. 3", "No. 5"), but may end a sentence otherwise.
_BEFORE_NUMBER = frozenset(("fig", "figs", "eq", "eqs", "no", "nos", "vol", "vols", "pp", "p", "ch", "sec", "ref"))
_CLOSERS = "\"'”’)]»"
_TERMINATORS = ".!?…"
_LIST_ITEM = re.compile(r"\n[ \t]*(?:[-*•]|\d+[.)])[ \t]+")
_SPACE = re.compile(r"\s+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_LIST_NUMBER = re.compile(r"[ \t]*\d{1,3}")
_LIST_MARKER = re.compile(r"(?:[-*•]|\d{1,3}[.)])[ \t]+")


def _ends_with_abbreviation(text: str, rest: str) -> bool:
    """Whether the period closing ``text`` belongs to an abbreviation or an initial ("J.", "U.S."), given what follows."""
    match = re.search(r"(?<![A-Za-z])([A-Za-z][A-Za-z.]*)\.$", text)
    if match is None:
        return False
    word = match.group(1).lower()
    if word in _BEFORE_NUMBER:
        return rest[:1].isdigit()
    return word in _ABBREVIATIONS or len(word) == 1 or "." in word


def _is_list_number(text: str, i: int) -> bool:
    """Whether the period at ``i`` closes a list item's number ("1." alone at the start of a line)."""
    window = max(0, i - 8)
    newline = text.rfind("\n", window, i)
    if newline < 0 and window > 0:
        return False
    return _LIST_NUMBER.fullmatch(text, newline + 1, i) is not None


def _boundaries(text: str) -> Iterator[int]:
    """Where one claim ends and the next begins (offsets into ``text``)."""
    n, i = len(text), 0
    while i < n:
        c = text[i]
        if c == "\n":
            if _BLANK_LINE.match(text, i) or _LIST_ITEM.match(text, i):
                yield i
            i += 1
            continue
        if c not in _TERMINATORS:
            i += 1
            continue
        end = i + 1
        while end < n and text[end] in _TERMINATORS:  # "?!", "..."
            end += 1
        while end < n and text[end] in _CLOSERS:
            end += 1
        cited = _CITATIONS_AHEAD.match(text, end)
        if cited is not None:  # "... 4200 kPa. [s1]": the citation belongs to the sentence it ends
            end = cited.end()
        if end < n and not text[end].isspace():
            i = end  # "4.2", "e.g.,", "x.y": not a boundary
            continue
        if c == "." and _is_list_number(text, i):  # "1. First item": a list marker, not a sentence
            i = end
            continue
        rest = text[end : end + 64].lstrip()  # bounded: what follows decides, not the whole tail
        if c == "." and (_ends_with_abbreviation(text[max(0, i - 32) : i + 1], rest) or rest[:1].islower()):
            i = end
            continue
        yield end
        i = end


def split_claims(answer: str) -> list[str]:
    """``answer`` cut into claims: sentences, each with the citations that end it.

    A period inside a number ("4.2"), after an abbreviation ("e.g.", "Dr.") or an
    initial, or followed by a lowercase word does not end a sentence; a blank line
    or a new list item does (its marker, "-" or "1.", is not part of the claim). A
    line ending in ":" leads into the claim that follows it.
    """
    if not isinstance(answer, str):
        raise TypeError(f"ground() needs the answer as a str, got {type(answer).__name__}; pass the model's text")
    claims: list[str] = []
    start = 0
    for end in [*_boundaries(answer), len(answer)]:
        piece = answer[start:end].strip()
        marker = _LIST_MARKER.match(piece)
        if marker is not None:
            piece = piece[marker.end() :]
        if claims and claims[-1].endswith(":") and piece:  # "Steps:" leads into the item it introduces
            claims[-1] = f"{claims[-1]} {piece}"
        elif _CITATION.sub("", piece).strip(" \t\n.,;:!?"):
            claims.append(piece)
        elif piece and claims:  # a citation standing alone belongs to the claim before it
            claims[-1] = f"{claims[-1]} {piece}"
        start = end
    return claims


def _citations(claim: str) -> tuple[str, ...]:
    seen: list[str] = []
    for match in _CITATION.finditer(claim):
        for cid in match.group(1).split(","):
            cid = cid.strip()
            if cid not in seen:
                seen.append(cid)
    return tuple(seen)


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of an answer and its verdict. ``receipts``: the cited spans that resolved."""

    text: str
    citations: tuple[str, ...]
    status: ClaimStatus
    reason: str
    receipts: tuple[Receipt, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "citations": list(self.citations),
            "status": self.status.value,
            "reason": self.reason,
            "receipts": [r.as_dict() for r in self.receipts],
        }


@dataclass(frozen=True, slots=True)
class GroundingReport:
    """The verdict on one answer: its claims, in the order the answer makes them."""

    answer: str
    claims: tuple[Claim, ...]
    #: (saga id, log location) of the ANSWER_GROUNDED record, when one was written.
    logged: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def fully_grounded(self) -> bool:
        """True when the answer has claims and every one is VERIFIED (an empty answer proves nothing)."""
        return bool(self.claims) and all(c.status is ClaimStatus.VERIFIED for c in self.claims)

    def counts(self) -> dict[str, int]:
        """How many claims have each status (statuses that occurred only)."""
        out: dict[str, int] = {}
        for c in self.claims:
            out[c.status.value] = out.get(c.status.value, 0) + 1
        return out

    def summary(self) -> str:
        """One line: how many claims are verified, and the other statuses."""
        total = len(self.claims)
        verified = self.counts().get(ClaimStatus.VERIFIED.value, 0)
        others = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items()) if s != ClaimStatus.VERIFIED)
        head = f"{verified} of {total} claim(s) VERIFIED"
        tail = "fully grounded" if self.fully_grounded else "NOT fully grounded"
        return f"{head}{'; ' + others if others else ''} - {tail}"

    def format_annotated(self) -> str:
        """The answer, one claim a line, each wearing its label (and the reason when not VERIFIED).

        The claims are agent text: shown through ``inert``, so nothing in them acts on a terminal or page.
        """
        width = max((len(s.value) for s in ClaimStatus), default=0)
        lines = []
        for c in self.claims:
            line = f"[{c.status.value:<{width}}] {inert(c.text)}"
            if c.status is not ClaimStatus.VERIFIED:
                line += f"\n{'':<{width + 3}}^ {inert(c.reason)}"
            lines.append(line)
        lines.append(self.summary())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data (the body of the ANSWER_GROUNDED record)."""
        return {
            "answer_sha256": hashlib.sha256(self.answer.encode("utf-8", "surrogatepass")).hexdigest(),
            "fully_grounded": self.fully_grounded,
            "counts": self.counts(),
            "claims": [c.as_dict() for c in self.claims],
        }


def _judge(
    text: str, citations: tuple[str, ...], broker: ContextBroker, entails: Entails | None, check_numbers: bool,
) -> Claim:
    if not citations:
        return Claim(text, citations, ClaimStatus.UNCITED, "cites no source: the model's own assertion")
    receipts: list[Receipt] = []
    sources: list[str] = []
    for cid in citations:
        try:
            summary = broker.summary(cid)
        except ReceiptBroken as broken:  # never admitted, or evicted: <the eviction's reason>
            return Claim(text, citations, ClaimStatus.BROKEN_CITATION, f"[{cid}] {broken.reason}")
        for receipt in summary.receipts:
            try:
                sources.append(broker.resolve(receipt).text)
            except ReceiptBroken as broken:  # the document drifted or was evicted since admission
                return Claim(text, citations, ClaimStatus.BROKEN_CITATION,
                             f"[{cid}] stands on {receipt}, which no longer resolves: {broken.reason}")
            receipts.append(receipt)
    bare = _CITATION.sub(" ", text)
    pool = [_norm(s) for s in sources]
    for quote in quotes_in(bare):
        if not any(_norm(quote) in s for s in pool):
            return Claim(text, citations, ClaimStatus.BROKEN_QUOTE,
                         f'the quote "{clip(quote, 60)}" is not in the cited source(s) {", ".join(citations)}',
                         tuple(receipts))
    if check_numbers:
        for quantity in quantities_in(bare):
            # The same value, unit and qualifier: "4200 MPa" is not "4200 kPa", "forty thousand" not 4200.
            if not quantity.piece and not any(quantity_in(quantity, s) for s in sources):
                return Claim(text, citations, ClaimStatus.UNSUPPORTED,
                             f"the number {clip(quantity.written, 60)} is not in the cited source(s) "
                             f"{', '.join(citations)}", tuple(receipts))
    if entails is not None:
        said = entails(text, tuple(sources))
        if said is not None and not isinstance(said, bool):
            raise TypeError(
                f"the entails hook returned {type(said).__name__}; it must return True, False or None (no opinion)"
            )
        if said is False:
            return Claim(text, citations, ClaimStatus.UNSUPPORTED,
                         "the entailment check found the claim not supported by its sources", tuple(receipts))
    return Claim(text, citations, ClaimStatus.VERIFIED,
                 f"{len(receipts)} receipt(s) resolve now", tuple(receipts))


def ground(
    answer: str,
    broker: ContextBroker,
    *,
    entails: Entails | None = None,
    wal: WAL | str | os.PathLike[str] | None = None,
    check_numbers: bool = True,
) -> GroundingReport:
    """Check every claim of ``answer`` against ``broker`` now; log the verdict in a saga or to ``wal``.

    ``entails(claim, sources)`` is an optional judge (an LLM, an NLI model): False makes
    a cited claim UNSUPPORTED, None is no opinion. ``check_numbers=False`` lets a claim
    state numbers its sources do not (a sum the model computed); by default each one must
    be in a cited span. Inside a saga the ANSWER_GROUNDED record goes to the saga's log
    under its id (``wal=`` overrides the log); outside one it is written only with ``wal=``,
    under a fresh id.
    """
    if not isinstance(broker, ContextBroker):
        raise TypeError(
            f"ground() checks citations against a ContextBroker, got {type(broker).__name__}; "
            "pass the broker the summaries were admitted to"
        )
    if entails is not None and not callable(entails):
        raise TypeError("entails must be a callable entails(claim, sources) -> bool | None, or None")
    claims = tuple(_judge(text, _citations(text), broker, entails, check_numbers) for text in split_claims(answer))
    report = GroundingReport(answer, claims)
    saga = current_saga()
    given = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
    target = given if given is not None else (saga.wal if saga is not None else None)
    if target is None:
        return report
    saga_id = saga.saga_id if saga is not None else new_saga_id()
    ticket = target.append(RecordType.ANSWER_GROUNDED.value, saga_id, encodable(report.as_dict()))
    if saga is None:
        target.barrier(ticket)  # no saga end will make it durable: the verdict is evidence now
    return GroundingReport(answer, claims, (saga_id, target.location))
