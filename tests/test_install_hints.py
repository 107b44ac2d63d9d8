"""Every install command we print or document can only install this project, spelled as pip reads it.

``agent-saga`` on the package index is an unrelated project (0.x-2.x); an unpinned
``pip install 'agent-saga[encryption]'`` in a fresh venv installs its 2.3.11. So a hint
names a path in the checkout (``-e ./packages/core``) or pins the 3.x line
(``>=3.0.0``; an exact ``==`` pin is a deliberate choice and passes too), and an
extra is spelled as the metadata spells it (PEP 685), because the pip that
``python3 -m venv`` brings (23.2.1 on Python 3.11) installs nothing for ``[openai_agents]``.

Scanned: every Markdown file at the root, in docs/ and beside each package, the examples,
and the text of every source file the distributions ship (error messages, docstrings,
the scaffold's templates). New files are covered without edits here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "3.0.0"
#: The one module that spells the rule out (its own template and its docstring's counter-example).
EXEMPT = {ROOT / "packages/core/src/agent_saga/install.py"}

_COMMAND = re.compile(r"\bpip install\b([^`)#;&|\"\n]*)")
_TARGET = re.compile(r"^(?P<name>(?:[A-Za-z0-9._-]|<[a-z]+>)+)(?:\[(?P<extras>[^\]]*)\])?(?P<spec>.*)$")


def scanned() -> list[Path]:
    files = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("packages/*/README.md"),
             *ROOT.glob("examples/**/*.py")]
    for package in ROOT.glob("packages/*/src"):
        files += [p for p in package.rglob("*") if p.is_file() and p.suffix in (".py", ".tmpl", ".md", ".toml")]
    return sorted(set(files) - EXEMPT)


def normalized(extra: str) -> str:
    return re.sub(r"[-_.]+", "-", extra.strip()).lower()


def problems_in(text: str) -> list[str]:
    """What is wrong with each ``pip install`` in ``text`` (Markdown's inline code may wrap lines)."""
    found = []
    for command in _COMMAND.finditer(text.replace("\n", " ")):
        for token in command.group(1).split():
            token = token.strip("'")
            if not token or token.startswith("-"):
                continue
            if token.startswith((".", "/", "~")) or "/" in token.split("[")[0]:  # a path in the checkout
                match = re.search(r"\[([^\]]*)\]", token)
                extras = match.group(1).split(",") if match else []
                found += [f"{token}: spell the extra {e!r} as {normalized(e)!r}" for e in extras
                          if "<" not in e and e != normalized(e)]
                continue
            target = _TARGET.match(token)
            if target is None or not normalized(target["name"]).startswith("agent-saga"):
                continue  # not ours (uvicorn, pyautogen, ...), or prose
            for extra in (target["extras"] or "").split(","):
                if extra and "<" not in extra and extra != normalized(extra):
                    found.append(f"{token}: spell the extra {extra!r} as {normalized(extra)!r}")
            spec = target["spec"]
            if not spec.startswith(("==", f">={FLOOR}")):
                found.append(f"{token}: unpinned, it can resolve to the unrelated agent-saga 2.x on the index; "
                             f"pin '>={FLOOR}' or install from the checkout (-e ./packages/...)")
    return found


def test_no_install_hint_can_reach_the_other_agent_saga() -> None:
    files = scanned()
    assert len(files) > 100  # the sources were found, not an empty glob
    bad = [f"{path.relative_to(ROOT)}: {problem}" for path in files
           for problem in problems_in(path.read_text(encoding="utf-8"))]
    assert bad == []


@pytest.mark.parametrize(("text", "wrong"), [
    ("pip install 'agent-saga[encryption]'", True),
    ("pip install agent-saga-mcp", True),
    ("`pip install\n'agent-saga-temporal[model]'`", True),  # wrapped across two lines of Markdown
    ("pip install 'agent-saga[encryption]>=2'", True),
    ("pip install 'agent-saga-openai-agents[openai_agents]>=3.0.0'", True),  # pip 23 installs no extra
    ("pip install -e ./packages/core -e './packages/adapter-semantic-kernel[semantic_kernel]'", True),
    ("pip install 'agent-saga[encryption]>=3.0.0'", False),
    ("pip install -e ./packages/core -e './packages/adapter-<name>[<extra>]'", False),
    ("uv pip install -p .tox/peer 'agent-saga==2.3.11'", False),  # a deliberate pin of the other line
    ("`pip install pyautogen` now installs Microsoft's line, which `agent-saga-autogen` covers", False),
    ("install it with: pip install 'agent-saga-mcp>=3.0.0' uvicorn", False),
])
def test_the_scan_tells_a_hint_that_reaches_the_index_from_one_that_cannot(text: str, wrong: bool) -> None:
    assert bool(problems_in(text)) is wrong, problems_in(text)


def test_every_extra_is_declared_in_its_normalized_spelling() -> None:
    """The pyprojects declare and reference extras as the metadata will spell them."""
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        extras = project.get("optional-dependencies", {})
        assert [e for e in extras if e != normalized(e)] == [], pyproject
        for requirement in [r for reqs in extras.values() for r in reqs] + project.get("dependencies", []):
            match = re.search(r"\[([^\]]*)\]", requirement)
            assert match is None or all(e == normalized(e) for e in match.group(1).split(",")), (pyproject, requirement)


def test_the_hints_errors_print_are_pinned_and_normalized() -> None:
    from agent_saga.install import pip_install
    from agent_saga.plugins.discovery import FrameworkUnsupported

    assert pip_install("agent-saga", "encryption") == "pip install 'agent-saga[encryption]>=3.0.0'"
    message = str(FrameworkUnsupported("agent-saga-openai-agents", "openai_agents", "openai-agents is not installed"))
    assert message.endswith("pip install 'agent-saga-openai-agents[openai-agents]>=3.0.0'")
    assert problems_in(message) == []


# -- the README's install lines, with the pip a fresh `python3 -m venv` brings -------------------------

def readme_install_targets() -> list[str]:
    """What the README tells a user to install from the clone: the core, and each adapter of its table."""
    readme = (ROOT / "README.md").read_text()
    generic = re.search(r"pip install -e ./packages/core -e '\./packages/adapter-<name>\[<extra>\]'", readme)
    assert generic is not None, "the README's adapter install line moved: update this test with it"
    rows = re.findall(r"^\| [^|]+ \| `agent-saga-([a-z0-9-]+)\[([a-z0-9_,-]+)\]` \|", readme, re.M)
    assert len(rows) >= 7, rows
    assert "pip install -e ./packages/core" in readme
    return ["./packages/core", *(f"./packages/adapter-{name}[{extra}]" for name, extra in rows)]


def build_requires(target: str) -> list[str]:
    """The ``[build-system] requires`` of the pyproject at ``target`` (a path, perhaps with extras)."""
    pyproject = ROOT / target.split("[")[0] / "pyproject.toml"
    requires: list[str] = tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    return requires


@pytest.mark.slow
def test_the_readme_install_lines_install_their_extras_with_the_oldest_pip_a_venv_brings(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    pip = tmp_path / "venv" / "bin" / "pip"
    version = subprocess.run([pip, "--version"], capture_output=True, text=True, check=True).stdout
    targets = readme_install_targets()
    # The build backend once, then no build isolation: isolated, pip made a fresh environment and
    # installed the backend into it for each of the targets, most of this test's CPU (51 s -> 15 s
    # measured), for the same metadata (the backend the pyprojects name, resolved the same way).
    backends = sorted({req for target in targets for req in build_requires(target)})
    subprocess.run([pip, "install", "--quiet", *backends], check=True, timeout=300, capture_output=True)
    report = tmp_path / "report.json"
    run = subprocess.run([pip, "install", "--dry-run", "--no-deps", "--no-build-isolation", "--quiet",
                          "--report", str(report), *targets],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    items = json.loads(report.read_text())["install"]
    assert len(items) == len(targets)
    for item in items:
        # pip 23 compares the extra as typed with the metadata's spelling: a mismatch installs no framework.
        provided = item["metadata"].get("provides_extra", [])
        missing = [e for e in item.get("requested_extras", []) if e not in provided]
        assert missing == [], f"{item['metadata']['name']}: {missing} not in {provided} ({version.strip()})"
