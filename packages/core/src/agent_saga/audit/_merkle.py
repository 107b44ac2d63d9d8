"""Merkle trees as RFC 9162 section 2.1 defines them (the RFC 6962 tree).

* leaf hash ``SHA-256(0x00 || data)``, interior node ``SHA-256(0x01 || left || right)``
  (the two prefixes keep a leaf from ever being passed off as a node);
* a tree of ``n > 1`` leaves splits at ``k``, the largest power of two below ``n``;
* the root of the empty tree is ``SHA-256("")``.

Inclusion proofs (section 2.1.3) and consistency proofs (section 2.1.4) are both
generated and checked here. Hashes are raw 32-byte values; callers hex-encode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = [
    "MerkleTree",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_from_inclusion",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

_LEAF = b"\x00"
_NODE = b"\x01"
_EMPTY = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """The hash of one leaf: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(_LEAF + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(_NODE + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """A tree over already-hashed leaves; subtree roots are cached, so many proofs stay cheap."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        for i, h in enumerate(leaf_hashes):
            if len(h) != 32:
                raise ValueError(f"leaf hash {i} is {len(h)} bytes; leaf hashes are 32-byte SHA-256 values")
        self.leaves = list(leaf_hashes)
        self._memo: dict[tuple[int, int], bytes] = {}

    @property
    def size(self) -> int:
        return len(self.leaves)

    def root(self, size: int | None = None) -> bytes:
        """The root of the first ``size`` leaves (default: all of them)."""
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n} is outside 0..{self.size}")
        return _EMPTY if n == 0 else self._mth(0, n)

    def _mth(self, start: int, end: int) -> bytes:
        if end - start == 1:
            return self.leaves[start]
        key = (start, end)
        cached = self._memo.get(key)
        if cached is None:
            k = _split(end - start)
            cached = self._memo[key] = node_hash(self._mth(start, start + k), self._mth(start + k, end))
        return cached

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The audit path of leaf ``index`` in the tree of the first ``size`` leaves."""
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n} is outside 0..{self.size}")
        if not 0 <= index < n:
            raise ValueError(f"leaf index {index} is outside a tree of {n} leaves")
        proof: list[bytes] = []
        start, end, m = 0, n, index
        # Walk down from the root, collecting the sibling of each subtree we enter;
        # the RFC lists them leaf-first, so reverse at the end.
        while end - start > 1:
            k = _split(end - start)
            if m < k:
                proof.append(self._mth(start + k, end))
                end = start + k
            else:
                proof.append(self._mth(start, start + k))
                start, m = start + k, m - k
        proof.reverse()
        return proof

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """Proof that the tree of ``first`` leaves is a prefix of the tree of ``second``."""
        n = self.size if second is None else second
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n} is outside 0..{self.size}")
        if not 0 <= first <= n:
            raise ValueError(f"first size {first} must be between 0 and the second size {n}")
        if first in (0, n):
            return []
        proof: list[bytes] = []
        self._subproof(first, 0, n, True, proof)
        return proof

    def _subproof(self, m: int, start: int, end: int, whole: bool, out: list[bytes]) -> None:
        n = end - start
        if m == n:
            if not whole:
                out.append(self._mth(start, end))
            return
        k = _split(n)
        if m <= k:
            self._subproof(m, start, start + k, whole, out)
            out.append(self._mth(start + k, end))
        else:
            self._subproof(m - k, start + k, end, False, out)
            out.append(self._mth(start, start + k))


def tree_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root over ``leaf_hashes`` (``SHA-256("")`` when there are none)."""
    return MerkleTree(leaf_hashes).root()


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The inclusion proof of ``leaf_hashes[index]`` in the tree over all of them."""
    return MerkleTree(leaf_hashes).inclusion_proof(index)


def consistency_proof(leaf_hashes: Sequence[bytes], first: int) -> list[bytes]:
    """The consistency proof from the first ``first`` leaves to all of them."""
    return MerkleTree(leaf_hashes).consistency_proof(first)


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes | None:
    """The root an inclusion proof leads to (RFC 9162 2.1.3.2), or None if it is malformed."""
    if not 0 <= index < size or len(leaf) != 32 or any(len(p) != 32 for p in proof):
        return None
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size`` with ``root``."""
    return root_from_inclusion(index, size, leaf, proof) == root


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether ``proof`` shows the tree (first, first_root) is a prefix of (second, second_root).

    RFC 9162 2.1.4.2; a tree of size 0 is consistent with anything (empty proof).
    """
    if first < 0 or second < first or any(len(p) != 32 for p in proof):
        return False
    if first == 0:
        return not proof
    if first == second:
        return not proof and first_root == second_root
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:  # an exact power of two: its root is a node of the larger tree
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root
