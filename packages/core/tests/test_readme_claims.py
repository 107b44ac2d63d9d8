"""The README's numbers and its Act I animation, checked against the repository (core env, no framework).

If behaviour changes, these fail instead of the README quietly describing a project that no
longer exists: the adapter table against the ``packages/adapter-*`` distributions, the
failure shapes and invariants against ``verify_rollback_invariants``, "its only dependency
is pluggy" and the Python floor against the core's pyproject, and the animation against a
fresh ``agent-saga demo`` (the screenshot needs Chromium: tests/browser/test_readme_assets.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CORE = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text(encoding="utf-8"))


def adapter_distributions() -> set[str]:
    """The name of every adapter distribution in the repository, read from its pyproject."""
    return {
        tomllib.loads(p.read_text(encoding="utf-8"))["project"]["name"]
        for p in (ROOT / "packages").glob("adapter-*/pyproject.toml")
    }


def table_rows() -> list[str]:
    """The rows of the README's "Does it support my framework?" table (header and rule left out)."""
    start = README.index("| framework | adapter (extra) |")
    rows = []
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_adapter_table_has_one_row_per_adapter_distribution_and_no_other() -> None:
    rows = table_rows()
    named = [re.findall(r"`(agent-saga-[a-z0-9-]+)\[", row.split("|")[2]) for row in rows]
    assert all(len(n) == 1 for n in named), [r for r, n in zip(rows, named, strict=True) if len(n) != 1]
    in_table = [n[0] for n in named]
    existing = adapter_distributions()
    assert len(existing) >= 8  # the derivation found the packages (a moved tree would pass vacuously)
    assert sorted(in_table) == sorted(existing), (
        "README.md's adapter table and packages/adapter-* disagree: add a row for each new adapter "
        f"(missing: {sorted(existing - set(in_table))}), remove rows of removed ones "
        f"(extra: {sorted(set(in_table) - existing)})"
    )


def test_the_core_depends_on_pluggy_and_nothing_else() -> None:
    assert "its only dependency is `pluggy`" in README
    names = [re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0] for dep in CORE["project"]["dependencies"]]
    assert names == ["pluggy"]


def test_the_python_floor_is_the_cores() -> None:
    floor = re.search(r"`python3` must be (3\.\d+) or newer", README)
    assert floor is not None
    assert CORE["project"]["requires-python"] == f">={floor[1]}"


@pytest.mark.slow  # about two seconds of the real engine
def test_the_failure_shapes_and_invariants_are_what_the_verifier_finds() -> None:
    from agent_saga import verify_rollback_invariants

    claim = re.search(
        r"`verify_rollback_invariants\(max_steps=(\d+)\)` runs (\d+) failure shapes through the real engine\s+"
        r"against (\d+) invariants and finds no violation", README)
    assert claim is not None, "README.md no longer states what verify_rollback_invariants finds"
    steps, shapes, invariants = (int(x) for x in claim.groups())
    report = asyncio.run(verify_rollback_invariants(max_steps=steps))
    assert report.ok, report.format_text()
    assert (report.total, report.shapes, len(report.invariants)) == (shapes, shapes, invariants), report.format_text()


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_assets_script", ROOT / "scripts" / "readme_assets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_assets_script", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # runs `agent-saga demo` (it starts a worker process)
def test_the_readme_animation_is_what_a_fresh_demo_draws_byte_for_byte(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script()
    monkeypatch.chdir(tmp_path)
    log = script.run_demo(tmp_path)
    fresh, saga_id = script.animation(log, "onboard-acme")
    committed = (ROOT / "docs" / "images" / "demo-rollback.svg").read_text(encoding="utf-8")
    old_id = committed.split('data-saga="')[1].split('"')[0]

    def without_id(svg: str, sid: str) -> str:  # the saga id is random per run; nothing else is
        return svg.replace(sid, "<saga id>").replace(sid[:8], "<saga id>")

    assert "docs/images/demo-rollback.svg" in README
    assert without_id(fresh, saga_id) == without_id(committed, old_id), (
        "docs/images/demo-rollback.svg is stale: run `python3 -m tox exec -e ui -- python scripts/readme_assets.py`")
