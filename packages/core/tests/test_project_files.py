"""The files a user looks for at the root: LICENSE, SECURITY.md, CHANGELOG.md, CONTRIBUTING.md, CITATION.cff.

Each is checked against what it describes: the license against every pyproject, the
changelog and citation against the version, CONTRIBUTING's commands against the README and
tox.ini, every relative link against the tree.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from agent_saga import __version__

ROOT = Path(__file__).resolve().parents[3]


def text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_license_is_the_apache_2_text_every_distribution_declares() -> None:
    license_text = text("LICENSE")
    assert license_text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in license_text and "END OF TERMS AND CONDITIONS" in license_text
    assert "APPENDIX: How to apply the Apache License to your work." in license_text  # the whole text
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        assert tomllib.loads(pyproject.read_text())["project"]["license"] == "Apache-2.0", pyproject


@pytest.mark.parametrize("name", ["SECURITY.md", "CHANGELOG.md", "CONTRIBUTING.md", "README.md", "docs/MIGRATING.md"])
def test_every_relative_link_resolves(name: str) -> None:
    base = (ROOT / name).parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text(name)):
        if "://" in target:
            continue
        assert (base / target).exists(), f"{name} links to {target}, which does not exist"


def test_security_says_how_to_report_and_points_at_the_threat_model() -> None:
    security = text("SECURITY.md")
    assert "## Reporting a vulnerability" in security and "never in a public issue" in security
    assert "docs/SECURITY.md#what-is-not-promised" in security
    assert "## What is not promised" in text("docs/SECURITY.md")


def test_changelog_names_this_version() -> None:
    changelog = text("CHANGELOG.md")
    assert f"## {__version__}" in changelog
    removed = text("docs/MIGRATING.md").count("| removed")
    assert f"{removed} of 2.3.11's 222 top-level names are gone" in changelog


def test_contributing_gives_the_readmes_commands_and_a_fast_lane_that_exists() -> None:
    contributing = text("CONTRIBUTING.md")
    block = re.search(r"```bash\n(.*?)```", text("README.md"), re.DOTALL)
    assert block is not None
    for line in block[1].splitlines():
        assert line in contributing, line
    assert "python3 -m tox run -e core-fast" in contributing
    assert "[testenv:core-fast]" in text("tox.ini")


def cff_fields(source: str) -> dict[str, object]:
    """The top-level keys of a CITATION.cff of the plain form used here (no YAML library)."""
    fields: dict[str, object] = {}
    key = ""
    for line in source.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            key, _, value = line.partition(":")
            fields[key] = value.strip().strip('"') if value.strip() else []
        else:
            entries = fields[key]
            assert isinstance(entries, list), line
            entries.append(line.strip().removeprefix("- ").strip())
    return fields


def test_citation_is_cff_1_2_0_with_its_required_fields_and_this_version() -> None:
    fields = cff_fields(text("CITATION.cff"))
    assert fields["cff-version"] == "1.2.0"
    for required in ("cff-version", "message", "title", "authors"):
        assert fields.get(required), required
    authors = fields["authors"]
    assert isinstance(authors, list) and all(re.match(r"(name|family-names): ", a) for a in authors), authors
    assert fields["version"] == __version__
    core = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())
    assert fields["license"] == core["project"]["license"]
    assert fields["type"] == "software"
