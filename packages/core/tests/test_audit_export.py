"""export_bundle: a WORM bundle an auditor can re-check with sha256sum and hashlib alone."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from operator_support import trusted_operator_key

from agent_saga import FileWAL
from agent_saga.audit import VERIFICATION_RULE, ChainBroken, export_bundle, verify_log
from agent_saga.log import compact, redact_record

# An auditor's checker written from the manifest's prose rule: hashlib and json only.
INDEPENDENT_CHECK = textwrap.dedent("""
    import hashlib, json, sys
    bundle = sys.argv[1]
    manifest = json.load(open(bundle + "/manifest.json", encoding="utf-8"))
    data = open(bundle + "/records.jsonl", "rb").read()
    assert hashlib.sha256(data).hexdigest() == manifest["records_sha256"], "file digest"
    canon = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    fields = ("digest", "prev", "saga", "seq", "step", "ts", "type")
    records = [json.loads(line) for line in data.splitlines()]
    removed, end_hash, erased = set(), {}, set()
    for r in records:
        if r["type"] == "COMPACTION":
            for rng in r["body"]["removed"]:
                removed.update(range(rng["first"], rng["last"] + 1))
                end_hash[rng["last"]] = rng["last_hash"]
        if r["type"] == "REDACTION":
            erased.update(r["body"]["seqs"])
    prev_seq, prev_hash = 0, "0" * 64
    for r in records:
        header = {k: r[k] for k in fields if k in r}
        assert hashlib.sha256(canon(header)).hexdigest() == r["hash"], r["seq"]
        if "body" in r:
            assert hashlib.sha256(bytes.fromhex(r["salt"]) + canon(r["body"])).hexdigest() == r["digest"]
        else:
            assert r["seq"] in erased and "salt" not in r
        assert r["seq"] > prev_seq
        if r["seq"] == prev_seq + 1:
            assert r["prev"] == prev_hash, r["seq"]
        else:
            assert set(range(prev_seq + 1, r["seq"])) <= removed
            assert r["prev"] == end_hash[r["seq"] - 1]
        prev_seq, prev_hash = r["seq"], r["hash"]
    assert prev_hash == manifest["chain_head"] and len(records) == manifest["record_count"]
    assert "agent_saga" not in sys.modules
    print("INDEPENDENTLY VERIFIED", len(records))
""")


def make_log(path: Path) -> None:
    with FileWAL(path) as wal:
        for i in range(6):
            wal.append("STEP_COMMITTED", f"s{i % 3}", {"amount": 100 * i, "note": "café"}, 1)
        wal.append("SAGA_COMPLETED", "s1", {})
    signer = trusted_operator_key(path.parent / f"{path.name}.keys")
    redact_record(path, 3, by="dpo", reason="erasure", signer=signer)
    compact(path, keep=lambda r: r["saga"] != "s1", signer=signer)


@pytest.mark.slow
def test_bundle_reverifies_with_sha256sum_and_hashlib_alone(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    out = tmp_path / "audit-2026-07"
    result = export_bundle(wal_path, out)
    assert sorted(p.name for p in out.iterdir()) == ["SHA256SUMS", "manifest.json", "records.jsonl"]
    assert (out / "records.jsonl").read_bytes() == wal_path.read_bytes()  # verbatim
    for p in out.iterdir():
        assert not p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only
    sha256sum = shutil.which("sha256sum")
    assert sha256sum is not None, "coreutils sha256sum is needed for this check"
    checked = subprocess.run([sha256sum, "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "records.jsonl: OK" in checked.stdout
    assert "manifest.json: OK" in checked.stdout
    independent = subprocess.run([sys.executable, "-I", "-c", INDEPENDENT_CHECK, str(out)],
                                 capture_output=True, text=True)
    assert independent.returncode == 0, independent.stderr
    assert "INDEPENDENTLY VERIFIED" in independent.stdout
    m = json.loads((out / "manifest.json").read_text())
    report = verify_log(wal_path)
    assert m == result.manifest
    assert (m["chain"], m["chain_head"], m["record_count"]) == ("intact", report.head, report.records)
    assert (m["first_seq"], m["last_seq"]) == (report.first_seq, report.last_seq)
    assert m["verification_rule"] == VERIFICATION_RULE
    assert "sha256sum -c SHA256SUMS" in m["verification_rule"]
    assert m["redacted_seqs"] == [3]


@pytest.mark.slow
def test_a_tampered_bundle_fails_sha256sum(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    out = tmp_path / "b"
    export_bundle(wal_path, out)
    target = out / "records.jsonl"
    target.chmod(0o644)
    target.write_bytes(target.read_bytes().replace(b"300", b"900"))
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert checked.returncode != 0
    assert "records.jsonl: FAILED" in checked.stdout


def test_a_broken_chain_is_refused_unless_allowed_and_then_labelled(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    lines = wal_path.read_bytes().splitlines()
    lines[0] = lines[0].replace(b'"amount":0', b'"amount":5')
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines))
    out = tmp_path / "refused"
    with pytest.raises(ChainBroken, match=r"broken at seq 1 \(line 1\)") as info:
        export_bundle(wal_path, out)
    assert info.value.report.bad_seq == 1
    assert not out.exists()  # nothing written
    result = export_bundle(wal_path, tmp_path / "labelled", allow_broken=True)
    assert result.manifest["chain"].startswith("BROKEN at seq 1: the body does not match its digest")
    assert result.manifest["chain_status"] == "broken"


def test_an_existing_bundle_is_never_overwritten(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    out = tmp_path / "b"
    export_bundle(wal_path, out)
    with pytest.raises(FileExistsError, match="written once"):
        export_bundle(wal_path, out)


def test_an_unchained_log_is_refused_unless_allowed_and_then_labelled(wal_path: Path, tmp_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    with pytest.raises(ChainBroken, match="no hash chain"):
        export_bundle(wal_path, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    result = export_bundle(wal_path, tmp_path / "b", allow_broken=True)
    assert result.manifest["chain"] == "unchained"
    assert result.manifest["chain_head"] is None


def test_a_torn_tail_is_left_out_of_the_bundle(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    complete = wal_path.read_bytes()
    with open(wal_path, "ab") as fh:
        fh.write(b'{"partial')
    result = export_bundle(wal_path, tmp_path / "b")
    assert (tmp_path / "b" / "records.jsonl").read_bytes() == complete
    assert result.manifest["chain"] == "intact"
    assert any("torn" in n for n in result.manifest["notes"])


def test_a_bundle_is_private_to_its_owner(wal_path: Path, tmp_path: Path) -> None:
    import os

    make_log(wal_path)
    old = os.umask(0o022)
    try:
        export_bundle(wal_path, tmp_path / "new" / "bundle")
    finally:
        os.umask(old)
    out = tmp_path / "new" / "bundle"
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {
        "records.jsonl": 0o400, "manifest.json": 0o400, "SHA256SUMS": 0o400,
    }


def test_a_final_record_without_its_newline_is_exported_with_it(wal_path: Path, tmp_path: Path) -> None:
    make_log(wal_path)
    complete = wal_path.read_bytes()
    wal_path.write_bytes(complete[:-1])
    result = export_bundle(wal_path, tmp_path / "b")
    assert (tmp_path / "b" / "records.jsonl").read_bytes() == complete
    assert result.manifest["record_count"] == 6 and result.manifest["chain"] == "intact"
