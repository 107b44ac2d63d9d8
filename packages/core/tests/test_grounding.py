"""ground(): every claim of an answer wears its evidence or a label, and the verdict is a log record.

Each status comes from a real case against a real ContextBroker; the record goes
through a real FileWAL and is read back by `agent-saga verify`, certify, the
recovery fold and `agent-saga graph`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import FileWAL, MemoryWAL, ground, saga_scope
from agent_saga.audit import certify_log
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold
from agent_saga.runtime import ClaimStatus, ContextBroker, GroundingReport, SummaryRefused, split_claims
from agent_saga.ui import reconstruct, to_dot, to_mermaid

RUNBOOK = (
    "Main line. The pressure limit is 4200 kPa for the main line; operators log every reading.\n\n"
    'The valve manual says "close the bypass before venting" in bold type.\n\n'
    "Pump B was serviced on 12 March and runs at 1,450 rpm."
)
SECRET_PHRASE = "operators log every reading"  # document text: must never reach the log


def broker_with_summary() -> tuple[ContextBroker, str]:
    broker = ContextBroker()
    spans = broker.add_document("runbook", RUNBOOK)
    return broker, broker.admit_summary("the pressure limit is 4200 kPa", spans)


def statuses(report: GroundingReport) -> list[str]:
    return [c.status for c in report.claims]


# -- the statuses, each from a real case ------------------------------------------------------


def test_the_issue_snippet_runs_as_written() -> None:
    broker, sid = broker_with_summary()
    report = ground(f"The limit is 4200 kPa [{sid}]. It was installed in 2019, I believe.", broker)
    assert report.claims[0].status == "VERIFIED"
    assert report.claims[1].status == "UNCITED"
    assert report.fully_grounded is False
    assert report.claims[0].citations == (sid,) and report.claims[1].citations == ()
    annotated = report.format_annotated()
    assert "[VERIFIED" in annotated and "[UNCITED" in annotated
    assert "The limit is 4200 kPa [s1]." in annotated and "1 of 2 claim(s) VERIFIED" in annotated


def test_a_fully_cited_answer_is_fully_grounded_and_an_empty_one_is_not() -> None:
    broker, sid = broker_with_summary()
    report = ground(f"The limit is 4,200 kPa [{sid}]. That applies to the main line [{sid}].", broker)
    assert statuses(report) == ["VERIFIED", "VERIFIED"] and report.fully_grounded
    assert report.claims[0].receipts and all(r.doc_id == "runbook" for r in report.claims[0].receipts)
    assert not ground("", broker).fully_grounded  # no claim proves nothing


def test_citing_a_summary_never_admitted_is_a_broken_citation() -> None:
    broker, _ = broker_with_summary()
    (claim,) = ground("The limit is 4200 kPa [s99].", broker).claims
    assert claim.status == ClaimStatus.BROKEN_CITATION and "never admitted" in claim.reason


def test_an_evicted_summary_carries_its_eviction_reason_into_the_verdict() -> None:
    broker, sid = broker_with_summary()
    broker.evict_summary(sid, "superseded by the 2026 runbook")
    (claim,) = ground(f"The limit is 4200 kPa [{sid}].", broker).claims
    assert claim.status == "BROKEN_CITATION" and "superseded by the 2026 runbook" in claim.reason


def test_a_drifted_document_breaks_the_citations_that_stand_on_it() -> None:
    broker, sid = broker_with_summary()
    assert ground(f"The limit is 4200 kPa [{sid}].", broker).fully_grounded
    broker.add_document("runbook", RUNBOOK.replace("4200 kPa", "4800 kPa"))  # edited since it was cited
    (claim,) = ground(f"The limit is 4200 kPa [{sid}].", broker).claims
    assert claim.status == "BROKEN_CITATION" and "drifted" in claim.reason and claim.receipts == ()


def test_an_evicted_document_breaks_the_citations_that_stand_on_it() -> None:
    broker, sid = broker_with_summary()
    broker.evict("runbook", "retention: 30 days")
    (claim,) = ground(f"The limit is 4200 kPa [{sid}].", broker).claims
    assert claim.status == "BROKEN_CITATION" and "retention: 30 days" in claim.reason


def test_an_invented_quote_cannot_hide_behind_a_valid_citation() -> None:
    broker = ContextBroker()
    spans = broker.add_document("runbook", RUNBOOK)
    sid = broker.admit_summary('the manual says "close the bypass before venting"', spans)
    good = ground(f'The manual says “close the bypass before venting” [{sid}].', broker)
    assert statuses(good) == ["VERIFIED"]
    (claim,) = ground(f'The manual says "open the bypass before venting" [{sid}].', broker).claims
    assert claim.status == "BROKEN_QUOTE" and "open the bypass before venting" in claim.reason


def test_the_entailment_hook_can_say_no_and_none_is_no_opinion() -> None:
    broker, sid = broker_with_summary()
    answer = f"The limit is 4200 kPa [{sid}]."
    seen: list[tuple[str, Sequence[str]]] = []

    def judge(verdict: bool | None):  # type: ignore[no-untyped-def]
        def entails(claim: str, sources: Sequence[str]) -> bool | None:
            seen.append((claim, sources))
            return verdict
        return entails

    (no,) = ground(answer, broker, entails=judge(False)).claims
    assert no.status == "UNSUPPORTED" and "entailment" in no.reason
    assert statuses(ground(answer, broker, entails=judge(None))) == ["VERIFIED"]
    assert statuses(ground(answer, broker, entails=judge(True))) == ["VERIFIED"]
    claim, sources = seen[0]
    assert claim == answer and any("4200 kPa" in s for s in sources)  # the judge sees the spans' text
    # an uncited claim has no sources to judge: the hook is not asked
    seen.clear()
    assert statuses(ground("Nothing cited here.", broker, entails=judge(False))) == ["UNCITED"] and not seen


def test_a_number_the_cited_sources_do_not_hold_is_unsupported() -> None:
    broker, sid = broker_with_summary()
    (claim,) = ground(f"The limit is 4800 kPa [{sid}].", broker).claims
    assert claim.status == "UNSUPPORTED" and "4800" in claim.reason
    # the citation's own id is not a number of the claim, and 42000 is not 4200
    assert ground(f"The limit is 42000 kPa [{sid}].", broker).claims[0].status == "UNSUPPORTED"
    # a number the model computed itself may be let through, deliberately
    assert ground(f"Twice the limit is 8400 kPa [{sid}].", broker, check_numbers=False).fully_grounded


@pytest.mark.parametrize("claim", [
    "The limit is 4200 MPa", "The limit is forty thousand kPa", "The limit is 4200e3 kPa",
    "The limit is 4.2 thousand kPa", "The limit is 4200 thousand kPa",
])
def test_another_unit_a_scale_or_words_is_another_quantity(claim: str) -> None:
    # Issue 40 item 5: "4200 MPa" and "forty thousand kPa" were VERIFIED against "4200 kPa".
    broker, sid = broker_with_summary()
    [judged] = ground(f"{claim} [{sid}].", broker).claims
    assert judged.status == "UNSUPPORTED", judged


@pytest.mark.parametrize("claim", [
    "The limit is 4200 kPa", "The limit is 4,200 kPa", "The limit is 4200", "Pump B runs at 1,450 rpm",
])
def test_the_same_quantity_is_verified(claim: str) -> None:
    broker = ContextBroker()
    spans = broker.add_document("runbook", RUNBOOK)
    sid = broker.admit_summary("the pressure limit is 4200 kPa; pump B runs at 1,450 rpm", spans)
    [judged] = ground(f"{claim} [{sid}].", broker).claims
    assert judged.status == "VERIFIED", judged


def test_a_summary_cannot_change_a_quantitys_unit() -> None:
    broker = ContextBroker()
    spans = broker.add_document("runbook", RUNBOOK)
    with pytest.raises(SummaryRefused, match="4200 MPa"):
        broker.admit_summary("the pressure limit is 4200 MPa", spans)


def test_bad_input_is_a_one_line_error() -> None:
    broker, sid = broker_with_summary()
    with pytest.raises(TypeError, match="ContextBroker"):
        ground("The limit is 4200 kPa [s1].", {"s1": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as a str"):
        ground(b"bytes", broker)  # type: ignore[arg-type]
    def broken_judge(claim: str, sources: Sequence[str]) -> bool | None:
        raise RuntimeError("judge offline")

    with pytest.raises(RuntimeError, match="judge offline"):  # a broken judge is not evidence either way
        ground(f"The limit is 4200 kPa [{sid}].", broker, entails=broken_judge)
    with pytest.raises(TypeError, match="True, False or None"):
        ground(f"The limit is 4200 kPa [{sid}].", broker, entails=lambda c, s: "yes")  # type: ignore[arg-type,return-value]


# -- claims: sentences, split robustly ----------------------------------------------------------


def test_decimals_abbreviations_and_trailing_citations_stay_with_their_sentence() -> None:
    answer = ('The limit is 4.2 MPa, e.g. about 4200 kPa [s1]. Dr. Smith wrote "vent slowly." '
              "It runs at 1,450 rpm. [s2] Check it daily [s1, s2]!\n\n- first item\n- second item")
    assert split_claims(answer) == [
        "The limit is 4.2 MPa, e.g. about 4200 kPa [s1].", 'Dr. Smith wrote "vent slowly."',
        "It runs at 1,450 rpm. [s2]", "Check it daily [s1, s2]!", "first item", "second item",
    ]
    assert split_claims("See Fig. 3 for the curve. The answer is no. Then stop.") == [
        "See Fig. 3 for the curve.", "The answer is no.", "Then stop."]
    assert split_claims("Steps:\n1. Close the bypass [s1].\n2. Vent slowly. It was 2019. Done.") == [
        "Steps: Close the bypass [s1].", "Vent slowly.", "It was 2019.", "Done."]


_WORDS = st.sampled_from(["the", "limit", "is", "pump", "valve", "4.2", "4,200", "e.g.", "i.e.", "Dr. Smith",
                          "kPa", "(see table)", "3.14159", "U.S. rules", "vs.", "approx."])
_CITES = st.sampled_from(["", " [s1]", " [s2, s10]", " [runbook-1]"])


@st.composite
def _sentence(draw: st.DrawFn) -> str:
    first = draw(st.sampled_from(["The", "A", "Pump", "It"]))
    middle = draw(st.lists(_WORDS, max_size=8))
    last = draw(st.sampled_from(["today", "kPa", "valve", "rpm"]))
    cite = draw(_CITES)
    end = draw(st.sampled_from([".", "!", "?"]))
    cite_after = draw(st.booleans())
    body = " ".join([first, *middle, last])
    return f"{body}{end}{cite}" if cite_after else f"{body}{cite}{end}"


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_sentence(), min_size=1, max_size=6), st.sampled_from([" ", "  ", "\n", " \n\n"]))
def test_splitting_joined_sentences_gives_them_back(sentences: list[str], glue: str) -> None:
    assert split_claims(glue.join(sentences)) == sentences


def test_agent_text_is_shown_inert_in_the_annotated_answer() -> None:
    broker, _ = broker_with_summary()
    shown = ground("All good\x1b[2K\u202e. Trust me.", broker).format_annotated()
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "\\x1b[2K\\u202e" in shown


# -- the ANSWER_GROUNDED record -------------------------------------------------------------------


def grounded_log(path: Path) -> tuple[str, GroundingReport]:
    broker, sid = broker_with_summary()
    wal = FileWAL(path)
    try:
        with saga_scope(wal, name="answer-desk") as saga:
            report = ground(f"The limit is 4200 kPa [{sid}]. It was installed in 2019, I believe.", broker)
    finally:
        wal.close()
    return saga.saga_id, report


def test_in_a_saga_the_verdict_is_an_answer_grounded_record_without_the_document_text(tmp_path: Path) -> None:
    saga_id, report = grounded_log(tmp_path / "a.wal")
    assert report.logged is not None and report.logged[0] == saga_id
    (record,) = [r for r in read_records(tmp_path / "a.wal") if r["type"] == "ANSWER_GROUNDED"]
    assert record["saga"] == saga_id
    body = record["body"]
    assert body["fully_grounded"] is False and body["counts"] == {"VERIFIED": 1, "UNCITED": 1}
    assert [(c["status"], c["citations"]) for c in body["claims"]] == [("VERIFIED", ["s1"]), ("UNCITED", [])]
    assert body["claims"][0]["receipts"] and body["claims"][0]["receipts"][0]["doc_id"] == "runbook"
    assert body["claims"][1]["reason"]
    assert SECRET_PHRASE not in (tmp_path / "a.wal").read_text()
    assert json.loads(json.dumps(report.as_dict())) == body


def test_with_wal_and_no_saga_the_record_is_written_and_durable() -> None:
    broker, sid = broker_with_summary()
    wal = MemoryWAL()
    report = ground(f"The limit is 4200 kPa [{sid}].", broker, wal=wal)
    (record,) = list(wal.records())
    assert record["type"] == "ANSWER_GROUNDED" and record["saga"] == report.logged[0]  # type: ignore[index]
    assert ground(f"The limit is 4200 kPa [{sid}].", broker).logged is None  # no saga, no wal: nothing


def test_the_log_may_be_named_by_its_path_as_the_cli_takes_it(tmp_path: Path) -> None:
    # issue 44 §5: wal= takes what --wal-path takes; a path was kept as a str and failed at the write.
    broker, sid = broker_with_summary()
    report = ground(f"The limit is 4200 kPa [{sid}].", broker, wal=tmp_path / "g.wal")
    assert [(r["type"], r["saga"]) for r in read_records(tmp_path / "g.wal")] == [("ANSWER_GROUNDED", report.logged[0])]  # type: ignore[index]


@pytest.mark.slow
def test_verify_certify_and_the_recovery_fold_accept_the_record(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    saga_id, _ = grounded_log(path)
    out = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal", str(path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert certify_log(path).certified
    view = fold(read_records(path))[saga_id]
    assert view.ended == "SAGA_COMPLETED" and not view.open


@pytest.mark.slow
def test_graph_shows_the_verdict_as_a_labelled_line(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    grounded_log(path)
    label = "answer: 1 of 2 claim(s) VERIFIED, 1 UNCITED - NOT fully grounded"
    (saga,) = reconstruct(read_records(path))
    assert [v.label for v in saga.verdicts] == [label] and saga.verdicts[0].kind == "bad"
    for fmt in ("mermaid", "dot"):
        out = subprocess.run([sys.executable, "-m", "agent_saga", "graph", "--wal", str(path), "--format", fmt],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if label in x)
        assert ("dirty" in line) if fmt == "mermaid" else ("#" in line)
        (tmp_path / f"g.{fmt}").write_text(out.stdout)
    svg = subprocess.run(["dot", "-Tsvg", str(tmp_path / "g.dot")], capture_output=True, text=True, check=False)
    assert svg.returncode == 0 and "NOT fully grounded" in svg.stdout
    mermaid = Path(__file__).parent / "mermaid"
    assert (mermaid / "node_modules" / "mermaid").is_dir(), "run `npm ci --prefix packages/core/tests/mermaid`"
    parsed = subprocess.run(["node", str(mermaid / "parse.mjs"), str(tmp_path / "g.mermaid")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr


def test_a_grounded_answer_is_drawn_ok_and_agent_text_in_a_forged_label_is_inert() -> None:
    broker, sid = broker_with_summary()
    wal = MemoryWAL()
    with saga_scope(wal, name="desk"):
        ground(f"The limit is 4200 kPa [{sid}].", broker)
    (saga,) = reconstruct(wal.records())
    assert saga.verdicts[0].kind == "ok" and "fully grounded" in saga.verdicts[0].label
    assert ":::clean" in next(x for x in to_mermaid([saga]).splitlines() if "fully grounded" in x)
    # a log written by someone else: its counts could carry control characters; they are drawn escaped
    forged = [*wal.records()]
    forged[1] = {**forged[1], "body": {"claims": [{"status": "VER\x1b[2KIFIED"}], "fully_grounded": True}}
    (saga,) = reconstruct(forged)
    assert saga.verdicts[0].kind == "bad"
    drawn = to_mermaid([saga]) + to_dot([saga])
    assert "\x1b" not in drawn and "\\x1b[2KIFIED" in drawn


def test_the_flight_recorder_serves_the_verdict_line_and_its_brief(tmp_path: Path) -> None:
    from agent_saga.ui import FileSource, RunStore

    path = tmp_path / "a.wal"
    saga_id, _ = grounded_log(path)
    store = RunStore(FileSource(path))
    store.refresh()
    run = store.run(saga_id)
    assert run is not None
    label = "answer: 1 of 2 claim(s) VERIFIED, 1 UNCITED - NOT fully grounded"
    assert [(v["type"], v["label"], v["kind"]) for v in run["verdicts"]] == [("ANSWER_GROUNDED", label, "bad")]
    assert any(r["type"] == "ANSWER_GROUNDED" and r["brief"] == label for r in run["records"])
