"""The chain verdicts recovery, certify and export rely on: a chained log never reads as 'partial'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import FileWAL
from agent_saga.audit import verify_log, verify_records
from agent_saga.log import canonical, chain_hash, content_digest, read_records
from agent_saga.log.codec import chain_lines, prepare_lines
from agent_saga.log.records import GENESIS


def chained_log(path: Path, n: int = 3) -> None:
    with FileWAL(path) as wal:
        wal.append("SAGA_STARTED", "s", {"name": "checkout"})
        for i in range(1, n):
            wal.append("STEP_COMMITTED", "s", {"i": i}, i)


def append_line(path: Path, record: dict[str, object]) -> None:
    with open(path, "ab") as fh:
        fh.write(json.dumps(record).encode() + b"\n")


def test_a_plain_line_appended_to_a_chained_log_is_a_break(wal_path: Path) -> None:
    chained_log(wal_path)
    append_line(wal_path, {"seq": 4, "ts": 1, "type": "SAGA_COMPLETED", "saga": "s", "body": {}})
    report = verify_log(wal_path)
    assert report.status == "broken" and not report.ok
    assert (report.bad_seq, report.bad_line) == (4, 4)
    assert "no hash chain inside a chained log" in report.reason
    assert report.last_seq == 3  # checked up to the record before it


def test_a_record_stripped_of_its_chain_in_the_middle_is_a_break(wal_path: Path) -> None:
    chained_log(wal_path, 4)
    records = list(read_records(wal_path))
    for key in ("hash", "prev", "digest", "salt"):
        del records[1][key]
    report = verify_records(records)
    assert report.status == "broken"
    assert report.bad_seq == 2


def test_an_unchained_writer_after_a_chained_one_breaks_the_chain(wal_path: Path) -> None:
    chained_log(wal_path, 2)
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_COMPLETED", "s", {})
    report = verify_log(wal_path)
    assert report.status == "broken" and report.bad_seq == 3


def test_a_chain_that_starts_late_is_partial_and_says_where(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
        wal.append("SAGA_COMPLETED", "a", {})
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_STARTED", "b", {})
    report = verify_log(wal_path)
    assert report.status == "partial" and not report.ok
    assert "2 record(s) carry no chain; it starts at seq 3" in report.reason


def test_an_unchained_log_is_unchained(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    report = verify_log(wal_path)
    assert report.status == "unchained" and not report.ok


def test_an_empty_log_is_reported_as_empty_not_intact(wal_path: Path) -> None:
    wal_path.write_bytes(b"")
    report = verify_log(wal_path)
    assert report.status == "empty" and report.label == "empty"
    assert report.ok  # nothing in it can have been altered
    assert "chain: intact" not in report.format_text()
    assert "empty log" in report.format_text()


def test_a_break_on_the_first_line_never_prints_none(wal_path: Path) -> None:
    wal_path.write_bytes(b"hello, this is not a log\nsecond line\n")
    text = verify_log(wal_path).format_text()
    assert "None" not in text
    assert "records: 2 (none checked before the break)" in text


def test_a_break_later_says_how_far_it_checked(wal_path: Path) -> None:
    chained_log(wal_path, 5)
    lines = wal_path.read_bytes().splitlines()
    lines[3] = lines[3].replace(b'"i":3', b'"i":4')
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines))
    report = verify_log(wal_path)
    assert report.bad_seq == 4
    assert "records: 5 (seq 1..3 checked before the break)" in report.format_text()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.text(min_size=1), st.text(), st.none() | st.integers(0, 10**6),
                          st.dictionaries(st.text(), json_values, max_size=4)), min_size=1, max_size=5),
       st.integers(1, 10**9))
def test_hand_formatted_lines_are_the_canonical_encoding(entries: list[Any], first: int) -> None:
    """The flusher formats each line by hand for speed; it must be exactly what the chain rule says."""
    data, last = chain_lines(prepare_lines(entries), first, GENESIS)
    prev = GENESIS
    lines = data.decode().split("\n")
    assert lines.pop() == ""
    for seq, ((ts, rtype, saga, step, body), line) in enumerate(zip(entries, lines, strict=True), first):
        record = json.loads(line)
        header = {"digest": record["digest"], "prev": prev, "saga": saga, "seq": seq, "ts": ts, "type": rtype}
        if step is not None:
            header["step"] = step
        assert record["digest"] == content_digest(record["salt"], canonical(body))
        assert record["hash"] == chain_hash(header)
        assert line == (f'{canonical(header)[:-1]},"body":{canonical(body)},"salt":"{record["salt"]}",'
                        f'"hash":"{record["hash"]}"}}')
        prev = record["hash"]
    assert last == prev
