"""``agent-saga mcp`` from the core alone: the verb belongs to ``agent-saga-mcp``.

The distribution registers the verb (its flags and the proxy) through the ``agent_saga_cli``
entry-point group; its own tests check the verb. Here, where it is not installed, the core
says what to install. (tests/test_packaging.py checks the same from a core-only wheel.)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga.cli.main import VERBS, build_parser


@pytest.fixture(autouse=True)
def _without_agent_saga_mcp() -> None:
    assert importlib.util.find_spec("agent_saga_mcp") is None, (
        "agent-saga-mcp is installed in this environment; run these in the core env (tox -e core), "
        "where it is not"
    )


def test_the_core_defines_no_mcp_verb() -> None:
    (verbs,) = [a for a in build_parser()._actions if a.dest == "verb"]
    assert "mcp" not in verbs.choices  # type: ignore[operator]
    assert "mcp" not in VERBS


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["mcp", "--policy", "p.json", "--", "python", "-m", "s"],
    ["mcp", "--help"],
    ["mcp"],
])
def test_without_agent_saga_mcp_the_verb_exits_3_naming_the_distribution(args: list[str], tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "agent_saga", *args], capture_output=True, text=True,
                         timeout=60, check=False, cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "pip install 'agent-saga-mcp>=3.0.0'" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""
