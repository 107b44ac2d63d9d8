"""Selective disclosure under a published root, and signed checkpoints."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from agent_saga import FileWAL, audit_root, build_disclosure, verify_disclosure
from agent_saga.audit import DisclosureProof
from agent_saga.audit._disclosure import LEAF_DOMAIN, record_leaf
from agent_saga.audit._merkle import leaf_hash, tree_root
from agent_saga.log import HEADER_FIELDS, canonical, read_records, redact_record


def make_log(path: Path) -> list[dict[str, Any]]:
    with FileWAL(path) as wal:
        for i in range(11):
            saga = "checkout_402" if i % 4 == 1 else f"other_{i % 3}"
            wal.append("STEP_COMMITTED", saga, {"card": f"4242-{i:04d}", "amount": 1000 + i}, i)
    return list(read_records(path))


def test_a_disclosure_proves_one_saga_and_reveals_only_it(wal_path: Path) -> None:
    records = make_log(wal_path)
    root = audit_root(records)
    # The root is the RFC 9162 root over domain-tagged canonical headers, in log order.
    expected = tree_root([
        leaf_hash(LEAF_DOMAIN + canonical({k: r[k] for k in HEADER_FIELDS if k in r}).encode()) for r in records
    ])
    assert root == expected.hex()
    proof = build_disclosure(records, saga_id="checkout_402")
    verdict = verify_disclosure(proof, root)
    assert verdict.valid
    assert bool(verdict)
    assert verdict.records == 3
    text = proof.to_json()
    assert {d.record["saga"] for d in proof.records} == {"checkout_402"}
    for r in records:
        if r["saga"] != "checkout_402":
            assert r["body"]["card"] not in text
            assert r["digest"] not in text
            assert r["salt"] not in text
            assert r["saga"] not in text
    # It survives a JSON round trip, as an auditor would receive it.
    assert verify_disclosure(json.loads(text), root).valid
    assert verify_disclosure(text, root).valid


def test_tampered_disclosures_are_rejected(wal_path: Path) -> None:
    records = make_log(wal_path)
    root = audit_root(records)
    good = build_disclosure(records, saga_id="checkout_402").to_dict()

    def altered(change: str) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(json.dumps(good))
        first = d["records"][0]
        if change == "body":
            first["record"]["body"]["amount"] += 1
        elif change == "header":
            first["record"]["ts"] += 1
            first["record"].pop("hash")
        elif change == "proof":
            p = bytearray.fromhex(first["proof"][0])
            p[0] ^= 1
            first["proof"][0] = p.hex()
        elif change == "index":
            first["index"] += 1
        elif change == "size":
            d["tree_size"] = 4
        elif change == "saga":
            first["record"]["saga"] = "other_0"
        elif change == "order":
            d["records"].reverse()
        elif change == "empty":
            d["records"] = []
        return d

    for change in ("body", "header", "proof", "index", "size", "saga", "order", "empty"):
        verdict = verify_disclosure(altered(change), root)
        assert not verdict.valid, change
        assert verdict.reason
    # A size that differs from the published one is refused when the size is pinned.
    grown = json.loads(json.dumps(good))
    grown["tree_size"] += 1
    assert not verify_disclosure(grown, root, tree_size=len(records)).valid
    assert verify_disclosure(good, root, tree_size=len(records)).valid
    other_root = audit_root(records[:-1])
    assert not verify_disclosure(good, other_root).valid
    assert "not hex" in verify_disclosure(good, "zz").reason


def test_redacted_records_still_prove_their_place(wal_path: Path, operator_key: Path) -> None:
    make_log(wal_path)
    redact_record(wal_path, 2, by="dpo", reason="erasure", signer=operator_key)
    records = list(read_records(wal_path))
    root = audit_root(records)
    proof = build_disclosure(records, saga_id="checkout_402")
    assert "body" not in proof.records[0].record
    assert verify_disclosure(proof, root).valid


def test_unchained_records_and_unknown_sagas_are_refused(wal_path: Path) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    with pytest.raises(ValueError, match="not chained"):
        audit_root(read_records(wal_path))
    records = make_log(wal_path.with_name("other.wal"))
    with pytest.raises(LookupError, match="no record of saga 'nope'"):
        build_disclosure(records, saga_id="nope")
    with pytest.raises(ValueError, match="not a disclosure proof"):
        DisclosureProof.from_dict({"format": "x"})


def test_signed_checkpoint_round_trip_and_forgery() -> None:
    pytest.importorskip("cryptography")  # the [encryption] extra; installed in CI's full env
    from agent_saga.audit.signing import (
        SignatureInvalid,
        checkpoint_text,
        generate_signer,
        sign_checkpoint,
        verify_checkpoint,
    )

    root = "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    skey, vkey = generate_signer("example.com/agent-saga")
    note = sign_checkpoint(skey, "example.com/agent-saga", 8, root)
    body = checkpoint_text("example.com/agent-saga", 8, root)
    assert note.startswith(body + "\n\u2014 example.com/agent-saga ")
    assert body.splitlines()[2] == base64.b64encode(bytes.fromhex(root)).decode()
    cp = verify_checkpoint(note, vkey)
    assert (cp.origin, cp.size, cp.root) == ("example.com/agent-saga", 8, root)
    with pytest.raises(SignatureInvalid):
        verify_checkpoint(note.replace("\n8\n", "\n9\n"), vkey)
    _, other = generate_signer("example.com/agent-saga")
    with pytest.raises(SignatureInvalid, match="no signature by key"):
        verify_checkpoint(note, other)
    with pytest.raises(ValueError, match="key name"):
        generate_signer("has space")


def test_record_leaf_commits_to_the_body_through_the_digest(wal_path: Path) -> None:
    records = make_log(wal_path)
    a = dict(records[0])
    b = dict(a, digest="0" * 64)
    assert record_leaf(a) != record_leaf(b)
