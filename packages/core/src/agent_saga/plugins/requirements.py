"""Just enough of PEP 440/508 to ask "is this framework installed at a supported version?".

The core depends on pluggy only, so it cannot lean on ``packaging``. Adapters declare
their framework range as an extra of their own distribution (``langgraph>=1.2,<1.3;
extra == "langgraph"``); this module reads such lines from installed metadata and
compares release numbers. Pre-releases sort before their final release; local
versions (``+abc``) are ignored; markers other than ``extra`` are not evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

__all__ = ["Requirement", "Version", "framework_requirements", "installed_version", "parse_requirement"]

_PRE_RANK = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "preview": 3}
_VERSION = re.compile(
    r"^\s*v?(?:\d+!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9.]+)?\s*$",
    re.IGNORECASE,
)
_NAME = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<rest>.*)$")
_SPEC = re.compile(r"^\s*(?P<op>~=|==|!=|<=|>=|<|>|===)\s*(?P<version>[^\s,;]+)\s*$")
_EXTRA = re.compile(r"""extra\s*==\s*['"](?P<extra>[^'"]+)['"]""")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, order=True, slots=True)
class Version:
    """A comparable version: release numbers, then pre/dev/final, then post."""

    release: tuple[int, ...]
    stage: tuple[int, int]  # (rank, number); a final release is (9, 0)
    post: int

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text)
        if match is None:
            raise ValueError(f"not a version agent-saga can compare: {text!r}")
        release = tuple(int(part) for part in match["release"].split("."))
        while len(release) > 1 and release[-1] == 0:
            release = release[:-1]  # 1.2.0 == 1.2
        if match["pre"]:
            stage = (_PRE_RANK[match["pre"].lower()], int(match["pre_n"] or 0))
        elif match["dev"] is not None:
            stage = (0, int(match["dev"] or 0))
        else:
            stage = (9, 0)
        post = int(match["post"] or 0) if match["post"] is not None else -1
        return cls(release, stage, post)

    @property
    def is_prerelease(self) -> bool:
        return self.stage[0] != 9


def _release_prefix(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True, slots=True)
class Requirement:
    """``name`` with a set of ``(operator, version)`` clauses, all of which must hold."""

    name: str
    clauses: tuple[tuple[str, str], ...]

    def contains(self, version: str) -> bool:
        """Whether ``version`` satisfies every clause (pre-releases only when named)."""
        have = Version.parse(version)
        named_pre = any(
            Version.parse(v).is_prerelease for _, v in self.clauses if not v.endswith(".*")
        )
        if have.is_prerelease and not named_pre:
            return False
        return all(_holds(op, want, have) for op, want in self.clauses)

    def __str__(self) -> str:
        return self.name + ",".join(op + v for op, v in self.clauses)


def _holds(op: str, want: str, have: Version) -> bool:
    if want.endswith(".*"):
        prefix = _release_prefix(want[:-2])
        padded = have.release + (0,) * max(0, len(prefix) - len(have.release))
        same = padded[: len(prefix)] == prefix
        if op == "==":
            return same
        if op == "!=":
            return not same
        raise ValueError(f"a wildcard version is only allowed with == or !=, got {op}{want}")
    target = Version.parse(want)
    if op in ("==", "==="):
        return have == target
    if op == "!=":
        return have != target
    if op == ">=":
        return have >= target
    if op == "<=":
        return have <= target
    if op == ">":
        return have > target
    if op == "<":
        # "<1.3" must not admit 1.3.0rc1: a pre-release of the excluded bound is excluded too.
        return have < target and not (have.is_prerelease and have.release == target.release)
    if op == "~=":
        match = _VERSION.match(want)
        assert match is not None  # Version.parse(want) above accepted it
        parts = _release_prefix(match["release"])
        if len(parts) < 2:
            raise ValueError(f"~= needs at least two release numbers, got ~={want}")
        upper = parts[:-1]
        padded = have.release + (0,) * max(0, len(upper) - len(have.release))
        return have >= target and padded[: len(upper)] == upper
    raise ValueError(f"unknown version operator {op!r}")


def parse_requirement(line: str) -> tuple[Requirement, str | None]:
    """Parse one ``Requires-Dist`` line; returns the requirement and its ``extra``, if any."""
    spec, _, marker = line.partition(";")
    match = _NAME.match(spec)
    if match is None:
        raise ValueError(f"not a requirement: {line!r}")
    rest = match["rest"].strip().strip("()")
    clauses: list[tuple[str, str]] = []
    if rest:
        for part in rest.split(","):
            clause = _SPEC.match(part)
            if clause is None or _VERSION.match(clause["version"].removesuffix(".*")) is None:
                raise ValueError(f"cannot read version clause {part.strip()!r} in {line!r}")
            clauses.append((clause["op"], clause["version"]))
    extra = _EXTRA.search(marker)
    return Requirement(_normalize(match["name"]), tuple(clauses)), (
        _normalize(extra["extra"]) if extra else None
    )


def framework_requirements(dist: metadata.Distribution, extra: str) -> tuple[Requirement, ...]:
    """What the adapter distribution ``dist`` declares under its extra ``extra``."""
    wanted = _normalize(extra)
    found: list[Requirement] = []
    for line in dist.requires or ():
        requirement, line_extra = parse_requirement(line)
        if line_extra == wanted:
            found.append(requirement)
    return tuple(found)


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None, without importing it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
