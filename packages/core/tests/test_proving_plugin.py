"""The pytest plugin: docs/PROVING.md's worked example, run as written, under pytest-asyncio and anyio.

Each run is a fresh ``python -m pytest`` in a temporary directory, so the plugin is
found through its ``pytest11`` entry point exactly as in a user's project.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "PROVING.md"
EXAMPLE = "test_onboarding_rollback.py"
LYING_OUTPUT = (
    "  LIES step 2 billing.charge [fail after]\n"
    "         engine: clean; undone: step 2 billing.charge, step 1 crm.create_contact\n"
    "         left behind: charges: [] -> ['ch_1']\n"
)


def example_from_the_doc() -> str:
    """The python blocks the doc marks as the example file, joined in order."""
    blocks = re.findall(rf"<!-- example: {re.escape(EXAMPLE)} -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2, f"docs/PROVING.md should hold the example in two marked blocks, found {len(blocks)}"
    return "\n\n".join(blocks)


def pytest_in(directory: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (directory / EXAMPLE).write_text(source)
    (directory / "pytest.ini").write_text("[pytest]\n")  # a project of its own, not this workspace
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_CORE"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args],
                          cwd=directory, env=env, capture_output=True, text=True, timeout=300, check=False)


def outcomes(run: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return dict(re.findall(rf"{EXAMPLE}::(\w+) (PASSED|FAILED)", run.stdout))


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    [plugin] = [e for e in entry_points(group="pytest11") if e.name == "agent_saga"]
    assert plugin.value == "_agent_saga_pytest"


@pytest.mark.slow
def test_the_doc_example_under_pytest_asyncio_passes_the_honest_test_and_fails_the_lying_one(
    tmp_path: Path,
) -> None:
    run = pytest_in(tmp_path, example_from_the_doc(), "-p", "no:anyio")

    assert run.returncode == 1, run.stdout + run.stderr
    assert outcomes(run) == {"test_onboarding_unwinds_from_any_step": "PASSED",
                             "test_a_refund_that_lies_is_caught": "FAILED"}
    assert "rollback proof: NOT PROVEN, 7 probe(s) across 3 step(s)" in run.stdout
    assert LYING_OUTPUT in run.stdout
    assert ("undo(s) that report success but leave the world changed: step 2 billing.charge "
            "(billing.refund_that_lies(charge_id='ch_1'))") in run.stdout
    # the output the doc shows is the output this run printed, line for line
    [shown] = re.findall(r"failed with:\n\n```text\n(.*?)```", DOC.read_text(), re.S)
    printed = run.stdout.splitlines()
    assert all(line in printed for line in shown.splitlines()), shown


@pytest.mark.slow
def test_the_doc_example_under_anyio_behaves_the_same(tmp_path: Path) -> None:
    source = example_from_the_doc().replace("@pytest.mark.asyncio", "@pytest.mark.anyio")
    source += '\n\n@pytest.fixture\ndef anyio_backend():\n    return "asyncio"\n'
    run = pytest_in(tmp_path, source, "-p", "no:asyncio")

    assert run.returncode == 1, run.stdout + run.stderr
    assert outcomes(run) == {"test_onboarding_unwinds_from_any_step": "PASSED",
                             "test_a_refund_that_lies_is_caught": "FAILED"}
    assert "anyio-" in run.stdout and "asyncio: mode" not in run.stdout  # anyio ran them, not pytest-asyncio
    assert LYING_OUTPUT in run.stdout


@pytest.mark.slow
def test_without_the_plugin_the_fixture_does_not_exist(tmp_path: Path) -> None:
    run = pytest_in(tmp_path, example_from_the_doc(), "-p", "no:agent_saga")
    assert "fixture 'assert_rollback_proven' not found" in run.stdout


@pytest.mark.slow
def test_import_agent_saga_never_imports_pytest_and_the_plugin_never_imports_agent_saga() -> None:
    probe = ("import sys, agent_saga, agent_saga.proving; assert 'pytest' not in sys.modules, 'pytest'; "
             "import _agent_saga_pytest; assert 'pytest' in sys.modules")
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
    probe = ("import sys, _agent_saga_pytest; "
             "assert not [m for m in sys.modules if m.startswith('agent_saga')], sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
