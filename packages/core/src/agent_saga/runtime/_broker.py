"""The ContextBroker: the documents a model was shown, cut into spans with receipts.

A model that says "the invoice says 4200" is believed only if the words can be
found again. The broker holds each document's text, cuts it into bounded spans on
paragraph and sentence boundaries, and gives every span a :class:`Receipt`: the
document id, the character range and the SHA-256 of the span's text. A receipt is
what travels (into a tag, a summary, a log record); the text stays here.

:meth:`ContextBroker.resolve` re-hydrates a receipt *now*. It fails, with a
:class:`ReceiptBroken` naming why, when the document was never admitted, was
evicted (the eviction reason is kept and reported), or drifted: it was re-added
with different text and the receipt's range no longer hashes to what was
receipted. A range whose text is unchanged still resolves after a re-add: the
receipt vouches for those characters, and they are still there.

Summaries are admitted, not trusted: :meth:`ContextBroker.admit_summary` checks
that the receipts resolve and that every number and every direct quote in the
summary appears in the text of the spans it is built on, and refuses it
(:class:`SummaryRefused`) otherwise.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_saga.inert import clip
from agent_saga.log.encodable import unencodable
from agent_saga.runtime._matching import quantities_in, quantity_in, quotes_in

__all__ = [
    "DEFAULT_SPAN_CHARS",
    "ContextBroker",
    "Receipt",
    "ReceiptBroken",
    "Span",
    "Summary",
    "SummaryRefused",
    "span_hash",
]

#: About a paragraph: small enough that a receipt points at what was used, large
#: enough that a sentence is rarely cut.
DEFAULT_SPAN_CHARS = 800

# A paragraph ends at a blank line; a sentence at . ! ? (or a closing quote/bracket
# after one) followed by white space.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+")


class ReceiptBroken(Exception):
    """A receipt or summary that does not resolve now; ``reason`` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SummaryRefused(ValueError):
    """A summary the broker will not admit; the message is the one-line reason."""


def span_hash(text: str) -> str:
    """The SHA-256 of a span's text (UTF-8; a lone surrogate is hashed as written, not refused)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where a span is and what it hashed to: enough to find it again, never the text."""

    doc_id: str
    start: int
    end: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        """The receipt as the log holds it (no text, by design)."""
        return {"doc_id": self.doc_id, "start": self.start, "end": self.end, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Any) -> Receipt:
        """Read back what :meth:`as_dict` wrote; a clear error for anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"a receipt is a dict with doc_id, start, end, sha256, got {type(data).__name__}")
        try:
            doc_id, start, end, sha = data["doc_id"], data["start"], data["end"], data["sha256"]
        except KeyError as err:
            raise ValueError(f"a receipt needs doc_id, start, end and sha256; {err.args[0]!r} is missing") from None
        receipt = cls(doc_id, start, end, sha)
        _check_receipt(receipt)
        return receipt

    def __str__(self) -> str:
        return f"{self.doc_id}[{self.start}:{self.end}]"


@dataclass(frozen=True, slots=True)
class Span:
    """One bounded piece of a document: its place, its text and the hash of that text."""

    doc_id: str
    index: int
    start: int
    end: int
    text: str
    sha256: str

    @property
    def receipt(self) -> Receipt:
        return Receipt(self.doc_id, self.start, self.end, self.sha256)

    def __repr__(self) -> str:
        # The text can be long: show where the span is and how it begins.
        head = self.text[:40] + ("..." if len(self.text) > 40 else "")
        return f"Span({self.doc_id!r}, index={self.index}, {self.start}:{self.end}, {head!r})"


@dataclass(frozen=True, slots=True)
class Summary:
    """An admitted summary: its id, its text and the receipts of the spans it stands on."""

    id: str
    text: str
    receipts: tuple[Receipt, ...]


@dataclass(slots=True)
class _Document:
    text: str
    spans: list[Span]
    origin: str | None = None
    by_range: dict[tuple[int, int], Span] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_range = {(span.start, span.end): span for span in self.spans}


class ContextBroker:
    """Documents, requests and summaries a model may cite, each resolvable by receipt.

    ``span_chars`` bounds a span's length: a document is cut at paragraph breaks,
    and a paragraph longer than that is cut between sentences (a sentence longer
    than that between words, a word longer than that wherever it must).
    """

    def __init__(self, span_chars: int = DEFAULT_SPAN_CHARS) -> None:
        if isinstance(span_chars, bool) or not isinstance(span_chars, int) or span_chars < 1:
            raise ValueError(f"span_chars must be a positive int (a span's maximum length), got {span_chars!r}")
        self.span_chars = span_chars
        self._lock = threading.Lock()
        self._docs: dict[str, _Document] = {}
        self._evicted: dict[str, str] = {}
        self._requests: dict[str, str] = {}
        self._summaries: dict[str, Summary] = {}
        self._evicted_summaries: dict[str, str] = {}
        self._request_ids = itertools.count(1)
        self._summary_ids = itertools.count(1)

    # -- documents ---------------------------------------------------------------------

    def add_document(self, doc_id: str, text: str, *, origin: str | None = None) -> list[Span]:
        """Admit ``text`` as ``doc_id`` and return its spans.

        ``origin`` says where the text came from (``"erp"``, ``"tool:crm.lookup"``): a
        policy may accept values only from documents of the origins it trusts
        (``ProvenancePolicy.require(..., from_origins=...)``), so a tool's answer, which
        the agent may have shaped through the tool's arguments, cannot source a payment.
        Label it in the code that adds the document, never from the model's text.

        Adding the same text again returns the same spans. Adding different text (or
        another origin) under the same id replaces it (the document drifted): receipts
        whose range no longer hashes the same stop resolving. Re-adding an evicted id
        admits it again.
        """
        _check_id(doc_id, "doc_id")
        if not isinstance(text, str):
            raise TypeError(f"add_document({doc_id!r}, text): text must be a str, got {type(text).__name__}")
        if origin is not None and (not isinstance(origin, str) or not origin.strip()):
            raise TypeError(f"add_document({doc_id!r}, ..., origin=): a non-empty str like 'erp', got {origin!r}")
        spans = [
            Span(doc_id, i, start, end, text[start:end], span_hash(text[start:end]))
            for i, (start, end) in enumerate(split_spans(text, self.span_chars))
        ]
        with self._lock:
            current = self._docs.get(doc_id)
            if current is not None and current.text == text and current.origin == origin:
                return list(current.spans)
            self._docs[doc_id] = _Document(text, spans, origin)
            self._evicted.pop(doc_id, None)
        return list(spans)

    def spans(self, doc_id: str) -> list[Span]:
        """The current spans of an admitted document (ReceiptBroken if it is not admitted now)."""
        with self._lock:
            doc = self._docs.get(doc_id)
            if doc is None:
                raise ReceiptBroken(self._absent(doc_id))
            return list(doc.spans)

    def origin(self, doc_id: str) -> str | None:
        """The origin ``doc_id`` was added with (None: none was given); ReceiptBroken if not admitted now."""
        with self._lock:
            doc = self._docs.get(doc_id)
            if doc is None:
                raise ReceiptBroken(self._absent(doc_id))
            return doc.origin

    def documents(self) -> list[str]:
        """The ids of the documents admitted now, in the order they were first added."""
        with self._lock:
            return list(self._docs)

    def evict(self, doc_id: str, reason: str) -> None:
        """Drop a document; receipts into it then fail with ``evicted: <reason>``."""
        _check_reason(reason, "evict")
        with self._lock:
            if doc_id not in self._docs:
                raise ValueError(
                    f"evict({doc_id!r}, ...): no such document is admitted now ({self._absent(doc_id)})"
                )
            del self._docs[doc_id]
            self._evicted[doc_id] = reason

    def resolve(self, receipt: Receipt | Span) -> Span:
        """The span a receipt points at, checked now; ReceiptBroken says why it cannot be had."""
        if isinstance(receipt, Span):
            receipt = receipt.receipt
        if not isinstance(receipt, Receipt):
            raise TypeError(f"resolve() takes a Receipt or a Span, got {type(receipt).__name__}")
        with self._lock:
            doc = self._docs.get(receipt.doc_id)
            if doc is None:
                raise ReceiptBroken(self._absent(receipt.doc_id))
        if not (0 <= receipt.start <= receipt.end <= len(doc.text)):
            raise ReceiptBroken("drifted: hash mismatch (the range is outside the document now)")
        text = doc.text[receipt.start:receipt.end]
        if span_hash(text) != receipt.sha256:
            raise ReceiptBroken("drifted: hash mismatch")
        span = doc.by_range.get((receipt.start, receipt.end))
        if span is not None:
            return span
        return Span(receipt.doc_id, -1, receipt.start, receipt.end, text, receipt.sha256)

    def _absent(self, doc_id: str) -> str:
        reason = self._evicted.get(doc_id)
        return "never admitted" if reason is None else f"evicted: {reason}"

    # -- requests ----------------------------------------------------------------------

    def add_request(self, text: str) -> str:
        """Register a person's request, kept verbatim; returns its id (``r1``, ``r2``, ...)."""
        if not isinstance(text, str) or not text:
            raise TypeError(f"add_request() takes the request's text as a non-empty str, got {text!r}")
        with self._lock:
            rid = f"r{next(self._request_ids)}"
            self._requests[rid] = text
        return rid

    def request(self, rid: str) -> str:
        """The verbatim text of request ``rid``."""
        with self._lock:
            try:
                return self._requests[rid]
            except (KeyError, TypeError):
                raise LookupError(f"no request {rid!r} was registered; use the id add_request() returned") from None

    # -- summaries ---------------------------------------------------------------------

    def admit_summary(self, text: str, spans: Sequence[Span | Receipt]) -> str:
        """Admit a summary of ``spans``; returns its id (``s1``, ``s2``, ...).

        Refused (:class:`SummaryRefused`) when a receipt does not resolve now, or a
        number or direct quote in ``text`` is not in the text of those spans.
        """
        if not isinstance(text, str) or not text.strip():
            raise SummaryRefused(f"a summary is a non-empty str, got {text!r}")
        if isinstance(spans, (Span, Receipt)):
            spans = [spans]
        if not spans:
            raise SummaryRefused("a summary needs at least one span or receipt to stand on")
        receipts: list[Receipt] = []
        sources: list[str] = []
        for item in spans:
            if not isinstance(item, (Span, Receipt)):
                raise SummaryRefused(f"a summary stands on Spans or Receipts, got {type(item).__name__}")
            try:
                span = self.resolve(item)
            except ReceiptBroken as err:
                where = item.receipt if isinstance(item, Span) else item
                raise SummaryRefused(f"receipt {where} does not resolve: {err.reason}") from None
            receipts.append(span.receipt)
            sources.append(span.text)
        joined = "\n\n".join(sources)
        for quantity in quantities_in(text):
            if not quantity.piece and not quantity_in(quantity, joined):
                raise SummaryRefused(f"the number {clip(quantity.written, 60)} is not in the summary's spans")
        for quote in quotes_in(text):
            if quote not in joined:
                raise SummaryRefused(f"the quote {clip(quote, 60)!r} is not in the summary's spans")
        with self._lock:
            sid = f"s{next(self._summary_ids)}"
            self._summaries[sid] = Summary(sid, text, tuple(receipts))
        return sid

    def summary(self, sid: str) -> Summary:
        """The admitted summary ``sid``; ReceiptBroken if it was never admitted or was evicted."""
        with self._lock:
            found = self._summaries.get(sid)
            if found is not None:
                return found
            reason = self._evicted_summaries.get(sid)
        raise ReceiptBroken("never admitted" if reason is None else f"evicted: {reason}")

    def evict_summary(self, sid: str, reason: str) -> None:
        """Drop a summary; citing it then fails with ``evicted: <reason>``."""
        _check_reason(reason, "evict_summary")
        with self._lock:
            if sid not in self._summaries:
                raise ValueError(f"evict_summary({sid!r}, ...): no such summary is admitted now")
            del self._summaries[sid]
            self._evicted_summaries[sid] = reason

    def verify_summary(self, sid: str) -> Summary:
        """The summary, only if it is live *and* every receipt it stands on resolves now."""
        found = self.summary(sid)
        for receipt in found.receipts:
            try:
                self.resolve(receipt)
            except ReceiptBroken as err:
                raise ReceiptBroken(f"receipt {receipt} {err.reason}") from None
        return found

    def summary_problem(self, sid: str) -> str | None:
        """Why summary ``sid`` cannot be relied on now, or None when it can."""
        try:
            self.verify_summary(sid)
        except ReceiptBroken as err:
            return err.reason
        return None

    def __repr__(self) -> str:
        return (
            f"ContextBroker(documents={len(self._docs)}, requests={len(self._requests)}, "
            f"summaries={len(self._summaries)}, span_chars={self.span_chars})"
        )


def split_spans(text: str, limit: int) -> list[tuple[int, int]]:
    """Cut ``text`` into ``(start, end)`` ranges of at most ``limit`` characters.

    A paragraph break always ends a span; inside a paragraph, the cut is at the
    last sentence end that fits, else the last white space, else at ``limit``.
    Leading and trailing white space is left out of every span, and a range of
    only white space is no span.
    """
    ranges: list[tuple[int, int]] = []
    paragraph_start = 0
    for brk in itertools.chain(_PARAGRAPH_BREAK.finditer(text), [None]):
        paragraph_end = len(text) if brk is None else brk.start()
        _split_paragraph(text, paragraph_start, paragraph_end, limit, ranges)
        if brk is not None:
            paragraph_start = brk.end()
    return ranges


def _split_paragraph(text: str, start: int, end: int, limit: int, out: list[tuple[int, int]]) -> None:
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(text, start, end)]
    pos = start
    while pos < end:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return
        if end - pos <= limit:
            cut = end
        else:
            # the last sentence end in (pos, pos + limit]: a bisect, so a long paragraph stays linear
            at = bisect.bisect_right(sentence_ends, pos + limit) - 1
            if at >= 0 and sentence_ends[at] > pos:
                cut = sentence_ends[at]
            else:
                window = text[pos:pos + limit]
                space = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
                cut = pos + space + 1 if space > 0 else pos + limit
        stop = cut
        while stop > pos and text[stop - 1].isspace():
            stop -= 1
        if stop > pos:
            out.append((pos, stop))
        pos = cut


def _check_id(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty str, got {value!r}")
    problem = unencodable(value, what)
    if problem is not None:
        raise ValueError(problem)


def _check_reason(reason: Any, verb: str) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"{verb}() needs a reason (a non-empty str saying why), got {reason!r}")


def _check_receipt(receipt: Receipt) -> None:
    ok = (
        isinstance(receipt.doc_id, str) and receipt.doc_id
        and all(isinstance(v, int) and not isinstance(v, bool) for v in (receipt.start, receipt.end))
        and isinstance(receipt.sha256, str) and re.fullmatch(r"[0-9a-f]{64}", receipt.sha256) is not None
    )
    if not ok:
        raise ValueError(f"not a receipt: {receipt!r} (doc_id str, start/end ints, sha256 64 hex digits)")
