"""verify_log: every edit, reorder, insertion and deletion is found, and the first bad record named."""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from operator_support import trusted_operator_key

from agent_saga import FileWAL
from agent_saga.audit import verify_log, verify_records
from agent_saga.log import canonical, chain_hash, read_records
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.maintenance import compact, redact_record

AUDIT = ("COMPACTION", "REDACTION")

bodies = st.dictionaries(
    st.text("abcdefghij", min_size=1, max_size=6),
    st.one_of(st.integers(-10_000, 10_000), st.text(max_size=12), st.booleans()),
    max_size=4,
)
entries = st.lists(
    st.tuples(
        st.sampled_from(["SAGA_STARTED", "STEP_INTENT", "STEP_COMMITTED", "SAGA_COMPLETED"]),
        st.sampled_from(["s1", "s2", "s3"]),
        st.one_of(st.none(), st.integers(1, 5)),
        bodies,
    ),
    min_size=2,
    max_size=14,
)


Item = tuple[str, str, "int | None", dict[str, Any]]


def write_log(path: Path, items: Sequence[Item], batch: int) -> None:
    with FileWAL(path) as wal:
        for i, (rtype, saga, step, body) in enumerate(items):
            wal.append(rtype, saga, body, step)
            if i % batch == batch - 1:
                wal.barrier()  # several flushes: the chain must run on across batches


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def mutate(lines: list[bytes], kind: str, rnd: random.Random) -> list[bytes] | None:
    out = list(lines)
    n = len(out)
    if kind == "edit_body":
        candidates = []
        for i, line in enumerate(out):
            start = line.find(b'"body":')
            end = line.rfind(b',"salt":')
            if start < 0 or end < 0:
                continue
            spots = [p for p in range(start + 7, end) if chr(line[p]).isalnum()]
            candidates += [(i, p) for p in spots]
        if not candidates:
            return None
        i, p = rnd.choice(candidates)
        old = chr(out[i][p])
        new = rnd.choice([c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c != old])
        out[i] = out[i][:p] + new.encode() + out[i][p + 1 :]
    elif kind == "edit_header":
        i = rnd.randrange(n)
        record = json.loads(out[i])
        field = rnd.choice(["ts", "seq", "type", "saga", "step"])
        if field in ("ts", "seq"):
            record[field] += rnd.choice([-1, 1, 1000])
        elif field == "step":
            record["step"] = record.get("step", 0) + 1
        elif field == "type":
            record["type"] = "STEP_COMPENSATED" if record["type"] != "STEP_COMPENSATED" else "STEP_KEPT"
        else:
            record["saga"] = record["saga"] + "x"
        out[i] = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
    elif kind == "swap":
        if n < 2:
            return None
        i, j = sorted(rnd.sample(range(n), 2))
        out[i], out[j] = out[j], out[i]
    elif kind == "insert_copy":
        m, k = rnd.randrange(n), rnd.randrange(n + 1)
        out.insert(k, out[m])
    elif kind == "delete":
        del out[rnd.randrange(n)]
    return out


def first_difference(original: list[bytes], mutated: list[bytes]) -> int:
    for i, line in enumerate(mutated):
        if i >= len(original) or line != original[i]:
            return i
    return len(mutated)  # a deletion at the very end


def touches_audit(original: list[bytes], mutated: list[bytes]) -> bool:
    """Whether the mutation altered or removed a COMPACTION or REDACTION record."""
    gone = set(original) - set(mutated)
    return any(json.loads(x).get("type") in AUDIT for x in gone)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@pytest.mark.slow  # heavy (many examples): left to the full core env
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=entries,
    batch=st.integers(1, 5),
    maintenance=st.sampled_from(["none", "redact", "compact", "both"]),
    kind=st.sampled_from(["edit_body", "edit_header", "swap", "insert_copy", "delete"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_single_mutation_is_detected_at_the_first_changed_line(
    items: list[tuple[str, str, int | None, dict[str, Any]]], batch: int, maintenance: str, kind: str, seed: int
) -> None:
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.wal"
        write_log(path, items, batch)
        signer = trusted_operator_key(Path(tmp))
        if maintenance in ("redact", "both"):
            redact_record(path, rnd.randint(1, len(items)), by="test", reason="erasure", signer=signer)
        if maintenance in ("compact", "both"):
            drop = rnd.choice(["s1", "s2", "s3"])
            with FileWAL(path) as wal:
                wal.append("SAGA_COMPLETED", drop, {})  # only a settled saga is compacted away
            compact(path, keep=lambda r: r["saga"] != drop, signer=signer)
        clean = verify_log(path)
        assert clean.ok, clean.format_text()  # legitimate maintenance keeps the chain green
        original = lines_of(path)
        mutated = mutate(original, kind, rnd)
        if mutated is None or mutated == original:
            return
        path.write_bytes(b"".join(line + b"\n" for line in mutated))
        report = verify_log(path, expect_head=clean.head)
        assert report.status == "broken", (kind, report.format_text())
        assert not report.ok
        d = first_difference(original, mutated)
        if touches_audit(original, mutated):
            # An altered attestation un-explains the gap it covered, which may come earlier.
            assert report.bad_line is not None
            assert report.bad_line <= d + 1
        elif d == len(mutated):
            assert report.bad_seq is None
            assert "expected head" in report.reason
        else:
            assert report.bad_line == d + 1, (kind, d, report.format_text())
            bad = mutated[d]
            if _parses(bad) and isinstance(json.loads(bad).get("seq"), int):
                assert report.bad_seq == json.loads(bad)["seq"]


def test_an_intact_log_reports_its_head_and_range(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {"n": 1}), ("SAGA_COMPLETED", "a", None, {})], 1)
    report = verify_log(wal_path)
    records = list(read_records(wal_path))
    assert report.ok
    assert report.status == "intact"
    assert (report.records, report.first_seq, report.last_seq) == (2, 1, 2)
    assert report.head == records[-1]["hash"]
    assert "chain: intact" in report.format_text()


@pytest.mark.parametrize("number", [b"1e999", b"-1e999", b"NaN", b"Infinity"])
def test_a_number_out_of_range_is_a_broken_record_not_a_crash(wal_path: Path, number: bytes) -> None:
    # Python's JSON reads these as infinities or NaN, which the canonical form refuses to encode:
    # the check of the body's digest raised ValueError out of verify (found by the mutation test).
    write_log(wal_path, [("SAGA_STARTED", "a", None, {"n": 15}), ("SAGA_COMPLETED", "a", None, {})], 1)
    lines = wal_path.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"n":15', b'"n":' + number, 1)
    wal_path.write_bytes(b"".join(lines))
    report = verify_log(wal_path)
    assert not report.ok and report.bad_seq == 1
    assert "a number out of range (infinite or NaN), which no writer produces" in report.format_text()


def test_an_unchained_log_is_never_reported_intact(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    report = verify_log(wal_path)
    assert not report.ok
    assert report.status == "unchained"
    assert report.label == "unchained"


def test_a_partly_chained_log_says_so(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_COMPLETED", "a", {})
    report = verify_log(wal_path)
    assert report.status == "partial"
    assert not report.ok
    assert "1 of 2 records chained" in report.label


def test_an_unattested_gap_is_flagged_as_deletion(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {"i": i}) for i in range(5)], 5)
    lines = lines_of(wal_path)
    # Delete seq 2..3: seq 4 now follows seq 1.
    del lines[1:3]
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines))
    report = verify_log(wal_path)
    assert report.status == "broken"
    assert report.bad_seq == 4
    assert "seq 2..3 missing" in report.reason


def test_a_compaction_gap_with_the_wrong_prev_is_flagged(wal_path: Path, operator_key: Path) -> None:
    items: list[Item] = [("SAGA_STARTED", s, None, {}) for s in ("a", "b", "a")] + [("SAGA_COMPLETED", "b", None, {})]
    write_log(wal_path, items, 4)
    compact(wal_path, keep=lambda r: r["saga"] == "a", signer=operator_key)  # removes seq 2 and 4
    assert verify_log(wal_path).ok
    lines = [json.loads(x) for x in lines_of(wal_path)]
    attestation = lines[-1]
    assert attestation["type"] == "COMPACTION"
    assert [(r["first"], r["last"]) for r in attestation["body"]["removed"]] == [(2, 2), (4, 4)]
    # A forger re-links seq 3 straight to seq 1 and re-hashes it, so the record is
    # self-consistent; only the attested hash of removed seq 2 gives it away.
    forged = dict(lines[1])
    forged["prev"] = lines[0]["hash"]
    forged["hash"] = chain_hash(forged)
    report = verify_records([lines[0], forged, *lines[2:]])
    assert report.status == "broken"
    assert report.bad_seq == 3
    assert "attested hash of removed seq 2" in report.reason


def test_a_deleted_head_of_log_is_flagged(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {}) for _ in range(3)], 3)
    lines = lines_of(wal_path)
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines[1:]))
    report = verify_log(wal_path)
    assert report.bad_seq == 2
    assert "seq 1 missing" in report.reason


def test_truncation_is_caught_only_against_an_expected_head(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {}) for _ in range(3)], 3)
    head = verify_log(wal_path).head
    assert head is not None
    lines = lines_of(wal_path)
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines[:-1]))
    assert verify_log(wal_path).ok  # a chain alone cannot see its end cut off
    report = verify_log(wal_path, expect_head=head)
    assert not report.ok
    assert "expected head" in report.reason


def test_a_stripped_body_without_a_redaction_record_is_flagged(wal_path: Path) -> None:
    write_log(wal_path, [("STEP_COMMITTED", "a", 1, {"amount": 4200}), ("SAGA_COMPLETED", "a", None, {})], 2)
    records = list(read_records(wal_path))
    del records[0]["body"], records[0]["salt"]
    report = verify_records(records)
    assert report.bad_seq == 1
    assert "no REDACTION record" in report.reason


def test_a_body_without_salt_or_salt_without_body_is_flagged(wal_path: Path) -> None:
    write_log(wal_path, [("STEP_COMMITTED", "a", 1, {"amount": 4200})], 1)
    record = next(iter(read_records(wal_path)))
    no_salt = {k: v for k, v in record.items() if k != "salt"}
    no_body = {k: v for k, v in record.items() if k != "body"}
    assert "salt is missing" in verify_records([no_salt]).reason
    assert "salt was kept" in verify_records([no_body]).reason


def test_a_malformed_middle_line_is_named_by_line(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {}) for _ in range(3)], 3)
    lines = lines_of(wal_path)
    lines[1] = b"{not json"
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines))
    report = verify_log(wal_path)
    assert report.bad_line == 2
    assert report.bad_seq is None
    assert "line 2 is not a log record" in report.reason


def test_a_torn_final_line_is_noted_not_fatal(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {}) for _ in range(2)], 2)
    with open(wal_path, "ab") as fh:
        fh.write(b'{"digest":"ab')
    report = verify_log(wal_path)
    assert report.ok
    assert any("torn final line" in n for n in report.notes)


def test_lone_surrogates_are_a_finding_not_a_crash(wal_path: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {"k": "v"})], 1)
    text = wal_path.read_text().replace('"k":"v"', '"k":"\\ud800"')
    wal_path.write_text(text)
    report = verify_log(wal_path)
    assert report.status == "broken"
    assert "surrogate" in report.reason


def test_an_empty_log_is_intact_with_no_records(wal_path: Path) -> None:
    wal_path.write_bytes(b"")
    report = verify_log(wal_path)
    assert report.ok
    assert report.records == 0


def test_a_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        verify_log(tmp_path / "nope.wal")


def test_an_attestation_that_claims_a_present_record_is_flagged(wal_path: Path, operator_key: Path) -> None:
    write_log(wal_path, [("SAGA_STARTED", "a", None, {}), ("SAGA_COMPLETED", "b", None, {}),
                         ("SAGA_STARTED", "c", None, {})], 3)
    compact(wal_path, keep=lambda r: r["saga"] != "b", signer=operator_key)
    records = list(read_records(wal_path))
    attestation = records[-1]
    # The operator's key re-signs the attestation claiming seq 1..2 went, although seq 1 is still
    # there (counts adjusted, so the body adds up by itself): only the log's content gives it away.
    body = attestation["body"]
    body["removed"][0].update(first=1, count=2)
    body["records"] = body["sagas"][0]["records"] = 2
    attestation["body"] = OperatorKey.load(operator_key).sign("COMPACTION", attestation["seq"], attestation["prev"], body)
    salt = bytes.fromhex(attestation["salt"])
    attestation["digest"] = hashlib.sha256(salt + canonical(attestation["body"]).encode()).hexdigest()
    attestation["hash"] = chain_hash(attestation)
    report = verify_records(records)
    assert report.bad_seq == attestation["seq"]
    assert "seq 1 is still in the log" in report.reason


def test_a_file_that_is_not_a_log_is_not_reported_intact(wal_path: Path) -> None:
    wal_path.write_bytes(b"\x89PNG\r\x1a binary, no newline")
    report = verify_log(wal_path)
    assert report.status == "broken"
    assert report.bad_line == 1
