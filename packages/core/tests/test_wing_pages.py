"""Each wing has its page in docs/, and the page's "Names, records, verbs" section is the wing's face.

The section lists every name of the face's ``__all__`` (one line each), names only record types the
log knows, and names every verb the wing's ``_cli`` module brings (cli/main.py's ``VERBS``): a new
public name, a renamed record type or a new verb without its line fails here (issue 42 §6). And
ARCHITECTURE.md's map of the house is the one the contracts draw now.
"""

from __future__ import annotations

import importlib
import re

import pytest
from house import MAP_END, MAP_START, PAGES, ROOT, WINGS, architecture_with_map

from agent_saga.cli.main import VERBS
from agent_saga.log.records import RecordType

DOCS = ROOT / "docs"
_LISTED = re.compile(r"^- `([A-Za-z_][A-Za-z0-9_]*)`: \S", re.MULTILINE)
_RECORD_LIKE = re.compile(r"`([A-Z][A-Z_]+[A-Z])`")


def face_line(wing: str) -> str:
    return f"The public face `{wing}` (its `__all__`"


def section(wing: str) -> str:
    """The wing's "Names, records, verbs" section of its page: from its heading to the next heading."""
    text = (DOCS / PAGES[wing]).read_text()
    for part in re.split(r"^(?=## )", text, flags=re.MULTILINE):
        if part.startswith("## Names, records, verbs") and face_line(wing) in part:
            return part
    raise AssertionError(f"docs/{PAGES[wing]} has no 'Names, records, verbs' section for {wing}: add one")


def test_every_wing_has_exactly_one_page_and_every_page_exists() -> None:
    assert sorted(PAGES) == sorted(WINGS), "house.PAGES must name a page for each wing of the contract, and only those"
    for wing, page in PAGES.items():
        holders = [p.name for p in DOCS.glob("*.md") if face_line(wing) in p.read_text()]
        assert holders == [page], f"{wing}'s face should be listed on docs/{page} alone, found on {holders}"


@pytest.mark.parametrize("wing", sorted(PAGES))
def test_the_page_lists_the_face_exactly(wing: str) -> None:
    listed = _LISTED.findall(section(wing))
    face = list(importlib.import_module(wing).__all__)
    assert len(listed) == len(set(listed)), f"docs/{PAGES[wing]} lists a name of {wing} twice"
    assert set(listed) == set(face), (
        f"docs/{PAGES[wing]} ({wing}): undocumented {sorted(set(face) - set(listed))}, "
        f"no longer exported {sorted(set(listed) - set(face))}")


@pytest.mark.parametrize("wing", sorted(PAGES))
def test_the_page_names_the_wings_verbs_and_only_record_types_that_exist(wing: str) -> None:
    text = section(wing)
    records = text[text.index("**Records it writes:**"):text.index("**CLI verbs:**")]
    unknown = {name for name in _RECORD_LIKE.findall(records) if name not in RecordType.__members__}
    assert not unknown, f"docs/{PAGES[wing]} ({wing}) names record types the log does not have: {sorted(unknown)}"
    verbs = text[text.index("**CLI verbs:**"):]
    mine = [verb for verb, (module, _help) in VERBS.items() if module == f"{wing}._cli"]
    missing = [verb for verb in mine if f"`{verb}`" not in verbs and f"`agent-saga {verb}" not in verbs]
    assert not missing, f"docs/{PAGES[wing]} ({wing}) does not name its verbs {missing}"


def test_the_architecture_map_is_the_one_the_contracts_draw() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text()
    assert text.count(MAP_START) == 1 and text.count(MAP_END) == 1, "ARCHITECTURE.md must hold the map's markers once"
    assert text == architecture_with_map(text), (
        "docs/ARCHITECTURE.md's map of the house is not the one the contracts draw: "
        "run `python packages/core/tests/house.py --write` and commit the result")
