"""Selective disclosure: prove one saga's records belong to a published log root.

Every chained record becomes one leaf of an RFC 9162 Merkle tree, in log order.
The leaf data is a domain tag followed by the record's canonical header, which
commits to the body through the salted digest; the RFC's 0x00/0x01 prefixes keep
leaves and nodes apart, and the tag keeps these leaves apart from any other use of
the same hash. Publish ``audit_root(records)`` once; hand an auditor
``build_disclosure(records, saga_id=...)``: that saga's records (header, body and
salt) with one inclusion proof each. Other sagas' records are never revealed: the
auditor sees only hashes of them (Merkle siblings, and each disclosed record's
``prev``), which say nothing about their saga, type, time or content.

What a disclosure proves: each disclosed record is, unchanged, at its position in
the log the root commits to. It does not prove the prover disclosed *every* record
of that saga; pair it with the saga's SAGA_STARTED..end records (whose step count
the auditor can check) or with a full export when completeness matters.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_saga.audit._merkle import MerkleTree, leaf_hash, verify_inclusion
from agent_saga.log.codec import canonical, chain_hash
from agent_saga.log.records import HEADER_FIELDS, Record

__all__ = [
    "LEAF_DOMAIN",
    "DisclosedRecord",
    "DisclosureProof",
    "DisclosureVerdict",
    "audit_root",
    "build_disclosure",
    "record_leaf",
    "verify_disclosure",
]

LEAF_DOMAIN = b"agent-saga/record-header/v1\n"
_FORMAT = "agent-saga-disclosure/1"


def record_leaf(record: Mapping[str, Any]) -> bytes:
    """The Merkle leaf hash of one chained record."""
    if "digest" not in record:
        raise ValueError(
            f"record seq {record.get('seq')} is not chained (no digest), so its header does not "
            "commit to its body; disclosure needs a log written with FileWAL(chain=True)"
        )
    header = {k: record[k] for k in HEADER_FIELDS if k in record}
    return leaf_hash(LEAF_DOMAIN + canonical(header).encode())


def _tree(records: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], MerkleTree]:
    rows = list(records)
    return rows, MerkleTree([record_leaf(r) for r in rows])


def audit_root(records: Iterable[Mapping[str, Any]]) -> str:
    """The hex Merkle root over ``records`` (every record of the log, in order): publish it."""
    return _tree(records)[1].root().hex()


@dataclass(frozen=True, slots=True)
class DisclosedRecord:
    index: int  # position of the leaf in the tree
    record: Record
    proof: tuple[str, ...]  # hex sibling hashes, leaf to root


@dataclass(frozen=True, slots=True)
class DisclosureProof:
    """One saga's records and their inclusion proofs under a root of ``tree_size`` leaves."""

    saga_id: str
    tree_size: int
    root: str
    records: tuple[DisclosedRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT, "saga_id": self.saga_id, "tree_size": self.tree_size, "root": self.root,
            "records": [{"index": d.index, "record": d.record, "proof": list(d.proof)} for d in self.records],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DisclosureProof:
        try:
            if data.get("format") != _FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {_FORMAT!r}")
            return cls(
                str(data["saga_id"]), int(data["tree_size"]), str(data["root"]),
                tuple(
                    DisclosedRecord(int(d["index"]), dict(d["record"]), tuple(str(p) for p in d["proof"]))
                    for d in data["records"]
                ),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a disclosure proof: {err}") from None

    @classmethod
    def from_json(cls, text: str) -> DisclosureProof:
        return cls.from_dict(json.loads(text))


def build_disclosure(records: Iterable[Mapping[str, Any]], *, saga_id: str) -> DisclosureProof:
    """The records of ``saga_id`` with an inclusion proof each, under ``audit_root(records)``."""
    rows, tree = _tree(records)
    chosen = [i for i, r in enumerate(rows) if r.get("saga") == saga_id]
    if not chosen:
        raise LookupError(f"no record of saga {saga_id!r} in these {len(rows)} records; nothing to disclose")
    return DisclosureProof(
        saga_id, tree.size, tree.root().hex(),
        tuple(
            DisclosedRecord(i, dict(rows[i]), tuple(p.hex() for p in tree.inclusion_proof(i)))
            for i in chosen
        ),
    )


@dataclass(frozen=True, slots=True)
class DisclosureVerdict:
    valid: bool
    reason: str = ""
    records: int = 0

    def __bool__(self) -> bool:
        return self.valid


def _unhex(value: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} is not hex") from None
    if len(raw) != 32:
        raise ValueError(f"{what} is {len(raw)} bytes, not 32")
    return raw


def verify_disclosure(
    proof: DisclosureProof | Mapping[str, Any] | str, root: str | bytes, *, tree_size: int | None = None
) -> DisclosureVerdict:
    """Check a disclosure against a root obtained independently (never the proof's own).

    Pass ``tree_size`` when it was published with the root (a signed checkpoint
    carries both): the proof must then be for exactly that tree.
    """
    try:
        if isinstance(proof, str):
            proof = DisclosureProof.from_json(proof)
        elif not isinstance(proof, DisclosureProof):
            proof = DisclosureProof.from_dict(proof)
        trusted = root if isinstance(root, bytes) else _unhex(root, "root")
        if len(trusted) != 32:
            raise ValueError("root is not 32 bytes")
    except ValueError as err:
        return DisclosureVerdict(False, str(err))
    if not proof.records:
        return DisclosureVerdict(False, "the proof discloses no record")
    if tree_size is not None and proof.tree_size != tree_size:
        return DisclosureVerdict(False, f"the proof is for a tree of {proof.tree_size} records, not {tree_size}")
    last = -1
    for d in proof.records:
        r = d.record
        seq = r.get("seq")
        if d.index <= last:
            return DisclosureVerdict(False, f"leaf indices are not strictly increasing at {d.index}")
        last = d.index
        if r.get("saga") != proof.saga_id:
            return DisclosureVerdict(False, f"record seq {seq} belongs to saga {r.get('saga')!r}, not {proof.saga_id!r}")
        try:
            problem = _content_problem(r)
            if problem:
                return DisclosureVerdict(False, f"record seq {seq}: {problem}")
            leaf = record_leaf(r)
            path: Sequence[bytes] = [_unhex(p, "a proof hash") for p in d.proof]
        except (ValueError, TypeError) as err:
            return DisclosureVerdict(False, f"record seq {seq}: {err}")
        if not verify_inclusion(d.index, proof.tree_size, leaf, path, trusted):
            return DisclosureVerdict(
                False, f"record seq {seq} (leaf {d.index}) is not included under this root"
            )
    return DisclosureVerdict(True, "", len(proof.records))


def _content_problem(r: Mapping[str, Any]) -> str:
    """The body must match the header's digest (unless erased); the hash field, if any, the header."""
    if "hash" in r and chain_hash(r) != r["hash"]:
        return "its hash does not match its header"
    salt = r.get("salt")
    if "body" in r or "enc" in r:
        if not isinstance(salt, str):
            return "its salt is missing"
        content = r["enc"].encode() if isinstance(r.get("enc"), str) else canonical(r.get("body")).encode()
        try:
            digest = hashlib.sha256(bytes.fromhex(salt) + content).hexdigest()
        except ValueError:
            return "its salt is not hex"
        if digest != r.get("digest"):
            return "its body does not match its digest"
    return ""
