"""``agent-saga mcp``: the verb this distribution adds to the core's command.

It is registered through the ``agent_saga_cli`` entry-point group (the core defines no
``mcp`` verb, see the core's test_cli_mcp.py); the proxy behind it is tested end to end in
test_proxy_e2e.py. Here: the verb is there, its usage errors exit 2 before anything runs, and
registering it costs the command no MCP SDK import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import agent_saga_mcp
import pytest
from conftest import BIN


def agent_saga(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The command run with ``stdin`` as its input (empty: at EOF, no client to answer)."""
    return subprocess.run([str(BIN / "agent-saga"), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd, input=stdin)


def test_the_verb_is_registered_through_the_entry_point_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="agent_saga_cli") if ep.name == "mcp"]
    assert ep.value == "agent_saga_mcp.cli"


def test_help_shows_the_observe_and_enforce_command_lines(tmp_path: Path) -> None:
    out = agent_saga("mcp", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "agent-saga mcp --observe --emit-policy saga-policy.json -- python -m my_mcp_server" in out.stdout
    assert "agent-saga mcp --policy saga-policy.json -- python -m my_mcp_server" in out.stdout
    assert "could not be loaded" not in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "p.json"], "name the server command after --"),
    (["--", "python", "-m", "s"], "--observe"),
    (["--policy", "p.json", "--emit-policy", "x.json", "--", "python"], "--emit-policy goes with --observe"),
    (["--observe", "--policy", "p.json", "--", "python"], "not allowed with"),
    (["--policy", "p.json", "--boundary", "sometimes", "--", "python"], "invalid choice"),
    (["--policy", "p.json", "--wal-path", " ", "--", "python"], "--wal-path is empty"),
    (["--policy", "p.json", "--rollback-grace", "-1", "--", "python"],
     "--rollback-grace takes a number of seconds >= 0 and goes with --policy, got -1.0"),
    (["--policy", "p.json", "--rollback-grace", "nan", "--", "python"], "got nan"),
    (["--policy", "p.json", "--rollback-grace", "soon", "--", "python"], "invalid float value: 'soon'"),
    (["--observe", "--rollback-grace", "1", "--", "python"], "goes with --policy, got 1.0 with --observe"),
])
def test_usage_errors_exit_2_before_anything_runs(args: list[str], message: str, tmp_path: Path) -> None:
    out = agent_saga("mcp", *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # no log, no policy file: nothing ran


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "p.json", "--", "python", "-m", "s"], "tools['t']: semantics 'MAYBE' is not one of"),
    (["--policy", "p.json"], "name the server command after --"),
])
def test_a_proxy_that_cannot_start_answers_the_clients_first_request_with_why(
    args: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"tools": {"t": {"semantics": "MAYBE"}}}))
    client = [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
              {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}},
              {"jsonrpc": "2.0", "id": 8, "method": "ping"}]
    out = agent_saga("mcp", *args, cwd=tmp_path, stdin="".join(json.dumps(m) + "\n" for m in client))
    assert out.returncode == 2, out.stderr
    (answer,) = [json.loads(line) for line in out.stdout.splitlines()]  # the first request, and only it
    assert answer["id"] == 7 and answer["error"]["code"] == -32003
    assert message in answer["error"]["message"] and message in out.stderr


def test_a_line_that_cannot_be_read_is_answered_with_a_null_id(tmp_path: Path) -> None:
    out = agent_saga("mcp", "--policy", "missing.json", "--", "python", cwd=tmp_path, stdin="{not json\n")
    assert out.returncode == 2
    (answer,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert answer["id"] is None and "cannot read tool policy 'missing.json'" in answer["error"]["message"]


def test_building_the_command_does_not_import_the_mcp_sdk() -> None:
    # The command registers this distribution's verb every time it starts, whatever the verb.
    code = ("import sys; from agent_saga.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')), "
            "'agent_saga_mcp.cli' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]", "True"], out.stdout + out.stderr


def test_the_proxy_reads_the_wire_with_the_types_alone_under_mcp_2() -> None:
    # mcp 2.x's mcp.types re-exports mcp_types: the proxy (one process per proxied server) imports that
    # alone, not the SDK and its transports (0.5 s of CPU each). 1.x has only the SDK's types.
    code = ("import sys, agent_saga_mcp.proxy; print('mcp' in sys.modules, 'mcp_types' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    expected = ["False", "True"] if agent_saga_mcp.MCP_MAJOR >= 2 else ["True", "False"]
    assert out.stdout.split() == expected, out.stdout + out.stderr


def test_every_public_name_is_importable_from_the_package() -> None:
    for name in agent_saga_mcp.__all__:
        assert getattr(agent_saga_mcp, name) is not None, name
    assert set(agent_saga_mcp.__all__) <= set(dir(agent_saga_mcp))
    with pytest.raises(AttributeError, match="no attribute 'Boundary'"):
        agent_saga_mcp.Boundary  # noqa: B018 - the proxy's old name: the core's Boundary is a different thing


@pytest.mark.parametrize(("args", "message"), [
    (["--server", "payments", "--", "/bin/sh", "-c", "true"], "--server payments runs ['python', '-m', 'srv']"),
    (["--server", "billing"], "lists no such server (it lists: payments)"),
    (["--server", "../payments"], "a server name is 1-64"),
])
def test_server_names_are_checked_against_the_hosts_list_before_anything_runs(
    args: list[str], message: str, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    listed = host / "etc" / "agent-saga" / "mcp-servers.json"
    listed.parent.mkdir(parents=True)
    listed.write_text(json.dumps({"servers": {"payments": {"command": ["python", "-m", "srv"]}}}))
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([str(BIN / "agent-saga"), "mcp", "--policy", "p.json", *args], capture_output=True,
                         text=True, timeout=120, check=False, cwd=work,
                         env={**os.environ, "AGENT_SAGA_HOST_ROOT": str(host)})
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert list(work.iterdir()) == []  # no log: nothing ran
