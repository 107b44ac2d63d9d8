"""examples/cross_framework.py: CrewAI, LangGraph and AutoGen agents, one saga (tox env cross_framework)."""

from __future__ import annotations

import configparser
import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from agent_saga.log import read_records
from agent_saga.plugins.requirements import framework_requirements

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cross_framework.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cross_framework_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# CrewAI warns from its own modules on import and on every Agent it builds.
@pytest.mark.filterwarnings(r"ignore:Cannot set an attribute on 'crewai:ImportWarning")
@pytest.mark.filterwarnings(r"ignore::DeprecationWarning:crewai\..*")
def test_one_boundary_unwinds_three_frameworks_last_in_first_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _load()
    world = example.main(tmp_path)
    out = capsys.readouterr().out

    # the world: the budget was reserved and the draft published, and both are undone
    assert "reserved budget    -> res_1" in out and "published draft    -> doc_1" in out
    assert world == {"reservations": {}, "published": {}}
    assert "FAILED: notification service unreachable" in out
    lines = [line.strip() for line in out.splitlines()]
    assert lines.index("<- writer.publish_draft") < lines.index("<- research.reserve_budget")
    assert "rollback reported: clean" in out
    assert "distinct saga ids : 1" in out

    # the log: one saga, three steps from three frameworks, undone newest first
    records = list(read_records(tmp_path / "cross-framework.wal"))
    assert len({r["saga"] for r in records}) == 1
    assert [r["body"]["tool"] for r in records if r["type"] == "STEP_INTENT"] == [
        "reserve_budget", "publish_draft", "notify"]
    assert [r["step"] for r in records if r["type"] == "STEP_COMPENSATED"] == [2, 1]
    assert [r["step"] for r in records if r["type"] == "STEP_NOT_APPLIED"] == [3]
    assert records[-1]["type"] == "SAGA_ROLLED_BACK" and records[-1]["body"]["clean"] is True


def test_run_twice_in_one_folder_each_run_reports_its_own_saga(tmp_path: Path) -> None:
    # As a user runs it, twice in the same folder: each run's log is its own (it once read the
    # previous run's records too and reported "distinct saga ids : 2").
    for _ in range(2):
        out = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600, check=True).stdout
        assert "distinct saga ids : 1" in out
        assert "rollback reported: clean" in out
        assert 'world afterwards: {"reservations": {}, "published": {}}' in out
    records = list(read_records(tmp_path / "cross-framework.wal"))
    assert len({r["saga"] for r in records}) == 1


def test_the_autogen_extra_installs_agentchat_which_the_run_helper_and_the_example_need() -> None:
    declared = framework_requirements(metadata.distribution("agent-saga-autogen"), "autogen")
    assert sorted(r.name for r in declared) == ["autogen-agentchat", "autogen-core"]
    metadata.version("autogen-agentchat")  # installed here through that extra (tox.ini lists no other way in)


def test_this_env_installs_exactly_what_the_example_says_it_needs() -> None:
    # The example's "Needs" line is what a user runs; tox's cross_framework env must install that,
    # so that a missing package in the line fails here instead of on a user's machine.
    needs = re.search(r"Needs, from a clone: pip install (.+?)\n\"\"\"", EXAMPLE.read_text(), re.S)
    assert needs is not None
    documented = {t.strip("'") for t in needs.group(1).split() if t != "-e"}
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(EXAMPLE.parents[1] / "tox.ini")
    deps = {line.strip().removeprefix("-e ").replace("packages/", "./packages/")
            for line in tox["testenv:cross_framework"]["deps"].splitlines() if line.strip()}
    assert deps - {"pytest>=8", "pytest-asyncio>=0.24"} == documented


def test_the_readme_framework_table_states_each_adapters_declared_range() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    table = readme.split("## Does it support my framework?", 1)[1].split("\n## ", 1)[0]
    adapters = sorted(p for p in (root / "packages").glob("adapter-*") if p.name != "adapter-mcp")
    assert len(adapters) >= 11
    for adapter in adapters:
        project = tomllib.loads((adapter / "pyproject.toml").read_text())["project"]
        # the extra is the plugin's name, spelled as the metadata normalizes it (PEP 685)
        extra = next(iter(project["entry-points"]["agent_saga_adapters"])).replace("_", "-")
        row = next((line for line in table.splitlines() if f"`{project['name']}[{extra}]`" in line), None)
        assert row is not None, f"README's framework table has no row for `{project['name']}[{extra}]`"
        for requirement in project["optional-dependencies"][extra]:
            assert f"`{requirement}`" in row or requirement in row, (adapter.name, requirement)
    assert "MCP" in table and "docs/MCP.md" in table
