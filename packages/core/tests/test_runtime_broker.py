"""ContextBroker: spans with receipts, drift, eviction, requests and admitted summaries."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga.runtime import ContextBroker, Receipt, ReceiptBroken, SummaryRefused

INVOICE = (
    "ACME Corp. Invoice 17.\n\n"
    "Issued 2026-11-02 to Example Ltd.\n\n"
    "Line items: consulting, 40 hours.\n\n"
    "Total due: 4,200.00 EUR. Pay by 2026-12-01.\n\n"
    'Terms: "net 30, no discount".'
)


def test_spans_carry_receipts_that_hash_their_text() -> None:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", INVOICE)
    assert [s.index for s in spans] == list(range(len(spans)))
    assert "4,200.00" in spans[3].text
    for span in spans:
        assert INVOICE[span.start:span.end] == span.text
        assert span.sha256 == hashlib.sha256(span.text.encode()).hexdigest()
        assert broker.resolve(span.receipt) == span
    assert spans[3].receipt.as_dict() == {
        "doc_id": "invoice-17", "start": spans[3].start, "end": spans[3].end, "sha256": spans[3].sha256,
    }
    assert "4,200" not in str(spans[3].receipt.as_dict())
    assert Receipt.from_dict(spans[3].receipt.as_dict()) == spans[3].receipt


@settings(max_examples=examples(60), deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab .!?\n"), max_size=400), limit=st.integers(min_value=1, max_value=50))
def test_spans_are_bounded_ordered_and_cover_every_non_space(text: str, limit: int) -> None:
    spans = ContextBroker(span_chars=limit).add_document("d", text)
    covered = set()
    last_end = 0
    for span in spans:
        assert 0 < span.end - span.start <= limit
        assert span.start >= last_end
        last_end = span.end
        covered.update(range(span.start, span.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_paragraph_and_sentence_boundaries_are_preferred() -> None:
    text = "One sentence here. Another one there. A third.\n\nNext paragraph."
    spans = ContextBroker(span_chars=40).add_document("d", text)
    assert [s.text for s in spans] == ["One sentence here. Another one there.", "A third.", "Next paragraph."]


def test_a_drifted_document_breaks_old_receipts_for_changed_text_only() -> None:
    broker = ContextBroker()
    old = broker.add_document("invoice-17", INVOICE)
    same = broker.add_document("invoice-17", INVOICE)
    assert same == old
    broker.add_document("invoice-17", INVOICE.replace("4,200.00", "9,900.00"))
    with pytest.raises(ReceiptBroken, match=r"^drifted: hash mismatch$"):
        broker.resolve(old[3].receipt)
    assert broker.resolve(old[0].receipt).text == old[0].text  # untouched text still stands


def test_eviction_and_never_admitted_say_why() -> None:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", INVOICE)
    with pytest.raises(ReceiptBroken, match=r"^never admitted$"):
        broker.resolve(Receipt("other", 0, 3, "0" * 64))
    broker.evict("invoice-17", "context window full")
    with pytest.raises(ReceiptBroken, match=r"^evicted: context window full$") as info:
        broker.resolve(spans[3])
    assert info.value.reason == "evicted: context window full"
    with pytest.raises(ValueError, match="needs a reason"):
        broker.evict("invoice-17", "")
    broker.add_document("invoice-17", INVOICE)
    assert broker.resolve(spans[3]) == spans[3]


def test_requests_are_kept_verbatim() -> None:
    broker = ContextBroker()
    rid = broker.add_request("please pay invoice 17 for ACME")
    assert broker.request(rid) == "please pay invoice 17 for ACME"
    with pytest.raises(LookupError, match="no request 'r99'"):
        broker.request("r99")


def test_a_summary_is_admitted_only_on_what_its_spans_say() -> None:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", INVOICE)
    sid = broker.admit_summary('ACME bills 4200 EUR, "net 30, no discount"', [spans[3], spans[4]])
    assert sid == "s1"
    assert broker.summary(sid).receipts == (spans[3].receipt, spans[4].receipt)
    with pytest.raises(SummaryRefused, match="the number 4300 EUR is not in the summary's spans"):
        broker.admit_summary("ACME bills 4300 EUR", [spans[3]])
    with pytest.raises(SummaryRefused, match="the quote 'net thirty' is not"):
        broker.admit_summary('terms are "net thirty"', [spans[4]])
    with pytest.raises(SummaryRefused, match="at least one span"):
        broker.admit_summary("nothing", [])
    with pytest.raises(ValueError):  # SummaryRefused is a ValueError
        broker.admit_summary("ACME bills 4200 EUR", [spans[0]])


def test_a_summary_on_a_broken_receipt_is_refused_and_a_live_one_can_break() -> None:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", INVOICE)
    sid = broker.admit_summary("total 4200", [spans[3]])
    assert broker.summary_problem(sid) is None
    broker.add_document("invoice-17", INVOICE.replace("4,200.00", "4,300.00"))
    assert broker.summary_problem(sid) == f"receipt {spans[3].receipt} drifted: hash mismatch"
    with pytest.raises(SummaryRefused, match="does not resolve: drifted: hash mismatch"):
        broker.admit_summary("total 4200", [spans[3]])
    broker.evict_summary(sid, "superseded")
    with pytest.raises(ReceiptBroken, match=r"^evicted: superseded$"):
        broker.summary(sid)
    with pytest.raises(ReceiptBroken, match=r"^never admitted$"):
        broker.summary("s42")


def test_a_receipt_for_any_range_resolves_while_its_characters_hash_the_same() -> None:
    from agent_saga.runtime._broker import span_hash

    broker = ContextBroker()
    broker.add_document("invoice-17", INVOICE)
    start = INVOICE.index("4,200.00")
    inner = Receipt("invoice-17", start, start + 8, span_hash("4,200.00"))
    found = broker.resolve(inner)
    assert (found.index, found.text) == (-1, "4,200.00")
    with pytest.raises(ReceiptBroken, match="outside the document"):
        broker.resolve(Receipt("invoice-17", 0, len(INVOICE) + 5, span_hash(INVOICE)))
    with pytest.raises(ValueError, match="sha256 64 hex digits"):
        Receipt.from_dict({"doc_id": "d", "start": 0, "end": 1, "sha256": "nope"})
