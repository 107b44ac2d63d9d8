"""The metadata-only version check patch_all makes before importing an adapter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.plugins.requirements import Version, parse_requirement


def test_a_requires_dist_line_with_its_extra() -> None:
    req, extra = parse_requirement('langgraph<1.3,>=1.2; extra == "langgraph"')
    assert (req.name, extra) == ("langgraph", "langgraph")
    assert req.contains("1.2.24")
    assert not req.contains("1.3.0")
    assert not req.contains("1.1.9")
    assert not req.contains("1.3.0rc1")  # a pre-release of the excluded bound stays excluded
    assert not req.contains("1.2.25a1")  # pre-releases only when asked for
    assert parse_requirement("wrapt>=1.16")[1] is None


def test_wildcards_and_compatible_release() -> None:
    req, _ = parse_requirement("x==0.14.*")
    assert req.contains("0.14.25")
    assert not req.contains("0.15.0")
    req, _ = parse_requirement("x~=1.2.0")
    assert req.contains("1.2.9")
    assert not req.contains("1.3")


def test_unreadable_clauses_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="cannot read version clause"):
        parse_requirement("x>>1")


releases = st.lists(st.integers(0, 30), min_size=1, max_size=4).map(lambda p: ".".join(map(str, p)))
suffixes = st.sampled_from(["", "a1", "b2", "rc1", ".post1", ".dev3"])
versions = st.builds(lambda r, s: r + s, releases, suffixes)
ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


@given(versions, versions)
def test_ordering_agrees_with_packaging(a: str, b: str) -> None:
    packaging = pytest.importorskip("packaging.version")
    assert (Version.parse(a) < Version.parse(b)) == (packaging.Version(a) < packaging.Version(b))
    assert (Version.parse(a) == Version.parse(b)) == (packaging.Version(a) == packaging.Version(b))


@given(ops, releases, releases)
def test_release_clauses_agree_with_packaging(op: str, bound: str, have: str) -> None:
    specifiers = pytest.importorskip("packaging.specifiers")
    req, _ = parse_requirement(f"x{op}{bound}")
    assert req.contains(have) == specifiers.SpecifierSet(f"{op}{bound}").contains(have)
