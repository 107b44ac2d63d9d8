"""``agent-saga mcp`` from the core alone: the verb is always there, the proxy is not.

The core never imports the MCP SDK; the verb's flags live in ``agent_saga.cli.mcp`` and the
proxy in the ``agent-saga-mcp`` distribution. These checks hold with or without it; what a
user without it is told is checked from a core-only wheel install (tests/test_packaging.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *args], capture_output=True, text=True,
                          timeout=60, check=False, cwd=cwd)


def test_help_shows_the_observe_and_enforce_command_lines() -> None:
    out = run("mcp", "--help")
    assert out.returncode == 0
    assert "agent-saga mcp --observe --emit-policy saga-policy.json -- python -m my_mcp_server" in out.stdout
    assert "agent-saga mcp --policy saga-policy.json -- python -m my_mcp_server" in out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["mcp", "--policy", "p.json"], "name the server command after --"),
    (["mcp", "--", "python", "-m", "s"], "--observe"),
    (["mcp", "--policy", "p.json", "--emit-policy", "x.json", "--", "python"], "--emit-policy goes with --observe"),
    (["mcp", "--observe", "--policy", "p.json", "--", "python"], "not allowed with"),
    (["mcp", "--policy", "p.json", "--boundary", "sometimes", "--", "python"], "invalid choice"),
])
def test_usage_errors_exit_2_before_anything_runs(args: list[str], message: str, tmp_path: Path) -> None:
    out = run(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr


def test_building_the_cli_does_not_import_the_mcp_sdk() -> None:
    code = ("import sys; from agent_saga.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'agent_saga_mcp'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
