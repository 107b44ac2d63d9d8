"""RFC 9162 Merkle trees against the transparency-dev/merkle reference vectors."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga.audit._merkle import (
    MerkleTree,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    tree_root,
    verify_consistency,
    verify_inclusion,
)

# The 8 leaves of the transparency-dev/merkle test suite (hex).
LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
)]
# Published roots for the first 1..8 leaves (transparency-dev/merkle proof/verify_test.go).
PUBLISHED_ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]
# Published inclusion proofs: (1-based leaf, tree size, proof).
INCLUSION = [
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (2, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
# Published consistency proofs: (size1, size2, proof).
CONSISTENCY = [
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]


def spec_root(data: list[bytes]) -> bytes:
    """MTH straight from RFC 9162 2.1.1, independent of the module under test."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return hashlib.sha256(b"\x01" + spec_root(data[:k]) + spec_root(data[k:])).digest()


def hashes(data: list[bytes]) -> list[bytes]:
    return [leaf_hash(d) for d in data]


def test_the_eight_leaf_root_is_the_published_one() -> None:
    assert tree_root(hashes(LEAVES)).hex() == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"


@pytest.mark.parametrize("size", range(9))
def test_roots_for_every_size_match_the_spec_and_the_published_vectors(size: int) -> None:
    root = tree_root(hashes(LEAVES[:size]))
    assert root == spec_root(LEAVES[:size])
    if size == 0:
        assert root.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    else:
        assert root == PUBLISHED_ROOTS[size - 1]


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert a == hashlib.sha256(b"\x00a").digest()
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    # A node's preimage presented as a leaf must not give the node's hash.
    assert leaf_hash(a + b) != node_hash(a, b)


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_published_inclusion_proofs_are_generated_and_verified(leaf: int, size: int, proof: list[str]) -> None:
    tree = MerkleTree(hashes(LEAVES))
    assert [p.hex() for p in tree.inclusion_proof(leaf - 1, size)] == proof
    assert verify_inclusion(leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), [bytes.fromhex(p) for p in proof],
                            PUBLISHED_ROOTS[size - 1])


@pytest.mark.parametrize(("first", "second", "proof"), CONSISTENCY)
def test_published_consistency_proofs_are_generated_and_verified(first: int, second: int, proof: list[str]) -> None:
    tree = MerkleTree(hashes(LEAVES))
    assert [p.hex() for p in tree.consistency_proof(first, second)] == proof
    assert verify_consistency(first, second, PUBLISHED_ROOTS[first - 1], PUBLISHED_ROOTS[second - 1],
                              [bytes.fromhex(p) for p in proof])


def _flip(proof: list[bytes], i: int) -> list[bytes]:
    out = list(proof)
    out[i] = bytes([out[i][0] ^ 8]) + out[i][1:]
    return out


def test_every_inclusion_proof_up_to_eight_verifies_and_every_tampering_is_rejected() -> None:
    tree = MerkleTree(hashes(LEAVES))
    some = hashlib.sha256(b"some").digest()
    for size in range(1, 9):
        root = tree.root(size)
        for index in range(size):
            leaf = tree.leaves[index]
            proof = tree.inclusion_proof(index, size)
            assert verify_inclusion(index, size, leaf, proof, root)
            assert root_from_inclusion(index, size, leaf, proof) == root
            bad = [
                (index + 1, size, leaf, proof, root),
                (index - 1, size, leaf, proof, root),
                (index ^ 2, size, leaf, proof, root),
                (index, size * 2, leaf, proof, root),
                (index, size // 2, leaf, proof, root),
                (index, size, leaf_hash(b"WrongLeaf"), proof, root),
                (index, size, leaf, proof, hashlib.sha256(b"").digest()),
                (index, size, leaf, proof, some),
                (index, size, leaf, [*proof, some], root),
                (index, size, leaf, [*proof, root], root),
                (index, size, leaf, [some, *proof], root),
                (index, size, leaf, [*proof, b""], root),
            ]
            bad += [(index, size, leaf, _flip(proof, i), root) for i in range(len(proof))]
            if proof:
                bad.append((index, size, leaf, proof[:-1], root))
            if len(proof) > 1:
                bad.append((index, size, leaf, [proof[0], some, *proof[1:]], root))
            for args in bad:
                if args[0] == index and args[1] == size and args[3] == proof and args[2] == leaf and args[4] == root:
                    continue
                assert not verify_inclusion(*args), (index, size, args[:2])


def test_every_consistency_proof_up_to_eight_verifies_and_every_tampering_is_rejected() -> None:
    tree = MerkleTree(hashes(LEAVES))
    for second in range(9):
        for first in range(second + 1):
            r1, r2 = tree.root(first), tree.root(second)
            proof = tree.consistency_proof(first, second)
            assert verify_consistency(first, second, r1, r2, proof), (first, second)
            if first in (0, second):
                assert proof == []
                if first == second and first > 0:
                    assert not verify_consistency(first, second, r1, leaf_hash(b"x"), proof)
                continue
            bad = [
                (first - 1, second, r1, r2, proof),
                (first + 1, second, r1, r2, proof),
                (first ^ 2, second, r1, r2, proof),
                (first, second * 2, r1, r2, proof),
                (first, second // 2, r1, r2, proof),
                (first, second, leaf_hash(b"WrongRoot"), r2, proof),
                (first, second, r1, leaf_hash(b"WrongRoot"), proof),
                (first, second, r2, r1, proof),
                (first, second, r1, r2, []),
                (first, second, r1, r2, [*proof, r1]),
                (first, second, r1, r2, [*proof, r2]),
                (first, second, r1, r2, [r1, *proof]),
                (first, second, r1, r2, [r2, *proof]),
                (first, second, r1, r2, [proof[0], *proof]),
                (first, second, r1, r2, proof[:-1]),
            ]
            bad += [(first, second, r1, r2, [bytes([p[0] ^ 16]) + p[1:] if j == i else p
                                              for j, p in enumerate(proof)]) for i in range(len(proof))]
            for args in bad:
                same_sizes = args[0] == first and args[1] == second
                if same_sizes and args[2] == r1 and args[3] == r2 and args[4] == proof:
                    continue
                if not same_sizes and 0 <= args[0] <= args[1] <= 8 and args[2:4] == (r1, r2) \
                        and tree.root(args[0]) == r1 and tree.root(args[1]) == r2:
                    continue  # still a true statement
                assert not verify_consistency(*args), (first, second, args[:2])


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=70), st.data())
def test_random_trees_prove_inclusion_and_consistency(data: list[bytes], draw: st.DataObject) -> None:
    tree = MerkleTree(hashes(data))
    n = len(data)
    assert tree.root() == spec_root(data)
    index = draw.draw(st.integers(0, n - 1))
    assert verify_inclusion(index, n, tree.leaves[index], tree.inclusion_proof(index), tree.root())
    first = draw.draw(st.integers(0, n))
    proof = tree.consistency_proof(first)
    assert verify_consistency(first, n, spec_root(data[:first]), tree.root(), proof)
    if 0 < first < n:
        forged = spec_root([*data[: first - 1], data[first - 1] + b"!"])
        assert not verify_consistency(first, n, forged, tree.root(), proof)


def test_bad_arguments_are_refused_with_a_clear_error() -> None:
    tree = MerkleTree(hashes(LEAVES[:3]))
    with pytest.raises(ValueError, match="leaf index 3 is outside a tree of 3"):
        tree.inclusion_proof(3)
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        tree.root(4)
    with pytest.raises(ValueError, match="32-byte"):
        MerkleTree([b"short"])
