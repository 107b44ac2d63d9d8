"""The ``agent-saga mcp`` verb: its flags, and the proxy run from them.

This distribution registers the verb with the ``agent-saga`` command through the
``agent_saga_cli`` entry-point group. The command loads this module every time it starts,
so it imports neither the MCP SDK nor the proxy until the verb runs.

``main()`` is also the ``agent-saga-mcp`` console script: the same flags, without the verb.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga import ConfigurationError, GatePort
from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import (
    LOG_ENV,
    add_imports_option,
    add_log_option,
    given_log,
    import_modules,
    open_log_to_write,
)
from agent_saga.plugins import PolicyError

if TYPE_CHECKING:
    from agent_saga_mcp.core import ProxyConfig

__all__ = ["add_arguments", "load_gate", "main", "register", "run"]

_EXAMPLES = (
    "examples:\n"
    "  agent-saga mcp --observe --emit-policy saga-policy.json -- python -m my_mcp_server\n"
    "  agent-saga mcp --policy saga-policy.json -- python -m my_mcp_server\n"
    "  agent-saga mcp --policy saga-policy.json --boundary explicit -- npx some-mcp-server\n"
    "  agent-saga mcp --policy saga-policy.json --server payments   # as /etc/agent-saga/mcp-servers.json says\n"
    "recover what a killed proxy left open (it starts only servers listed in its own mcp-servers.json):\n"
    "  agent-saga recover --wal-path agent-saga.wal --import agent_saga_mcp.handler"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--observe", action="store_true",
                      help="forward everything and record the server's tools (writes --emit-policy)")
    mode.add_argument("--policy", metavar="FILE", help="enforce this tool policy (JSON, agent-saga's tool policy format)")
    p.add_argument("--emit-policy", metavar="FILE", default=None,
                   help="with --observe: the policy skeleton to write or extend (default: saga-policy.json)")
    p.add_argument("--boundary", choices=("session", "explicit", "none"), default="session",
                   help="where a transaction ends: the connection (session), saga_commit/saga_rollback "
                   "tools (explicit), or nowhere: gate and audit only (none). Default: %(default)s")
    p.add_argument("--rollback-grace", metavar="SECONDS", type=float, default=None,
                   help="how long a transaction's end (saga_rollback, saga_commit, EOF) waits for its calls still "
                   "in flight; one still running then is left in flight and settled (undone, for a rollback) "
                   "when its answer arrives. Default: the saga option's (30)")
    add_log_option(p, "the log to write")
    p.add_argument("--gate", metavar="MODULE:ATTR", default=None,
                   help="a gate object (or a zero-argument factory) to check each call, e.g. myapp.gates:payments "
                   "(default: the kill switch)")
    add_imports_option(p, "@compensator handlers (for compensate.handler entries)")
    p.add_argument("--name", default="mcp", help="the saga name in the log (default: %(default)s)")
    p.add_argument("--server", metavar="NAME", default=None,
                   help="the server's name in /etc/agent-saga/mcp-servers.json: recorded with each undo, so the "
                   "recovery daemon starts that configured server (never a command from the log); without a "
                   "command after --, the proxy runs the configured one. Default: the entry whose command is "
                   "the one given, if any")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="the MCP server to run over stdio, after -- (optional with --server)")


def register(verbs: Any) -> None:
    """Add the ``mcp`` verb to the ``agent-saga`` command (the ``agent_saga_cli`` entry point)."""
    p = verbs.add_parser(
        "mcp",
        help="run an MCP server behind a transactional stdio proxy (observe, then enforce a policy)",
        description="Sit between an MCP client and a stdio MCP server. --observe forwards everything and "
        "writes a policy skeleton (every tool IRREVERSIBLE with a TODO); --policy runs declared tools as "
        "saga steps under the gate and refuses undeclared ones before they reach the server.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(run=run)


def _checked(args: argparse.Namespace) -> list[str]:
    """The server command given after --, once the flags make sense together (usage errors exit 2)."""
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command and args.server is None:
        raise CliError("name the server command after --, e.g. -- python -m my_mcp_server (or --server NAME)",
                       EXIT_USAGE)
    if not args.observe and not args.policy:
        raise CliError("say --observe (learn the tools) or --policy FILE (enforce one)", EXIT_USAGE)
    if args.emit_policy and not args.observe:
        raise CliError("--emit-policy goes with --observe", EXIT_USAGE)
    grace = args.rollback_grace
    if grace is not None and (args.observe or not math.isfinite(grace) or grace < 0):
        raise CliError(f"--rollback-grace takes a number of seconds >= 0 and goes with --policy, got {grace!r}"
                       f"{' with --observe' if args.observe else ''}", EXIT_USAGE)
    if not given_log(args).strip():
        raise CliError(f"--wal-path is empty: give the log file's path (or set ${LOG_ENV})", EXIT_USAGE)
    return command


def load_gate(spec: str) -> GatePort:
    """``module:attr`` -> a gate (an attribute that is a gate, or a factory returning one).

    The module is looked for in the working directory too (see ``import_modules``).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--gate takes MODULE:ATTR, got {spec!r}", EXIT_USAGE)
    try:
        value: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise CliError(f"--gate {spec}: {err}", EXIT_USAGE) from None
    if not isinstance(value, GatePort) and callable(value):
        value = value()
    if not isinstance(value, GatePort):
        raise CliError(f"--gate {spec} is a {type(value).__name__}, not a gate (admit/check/check_async/observe)",
                       EXIT_USAGE)
    return value


def run(args: argparse.Namespace) -> int:
    """Run the proxy for parsed ``agent-saga mcp`` arguments; return the exit code."""
    from agent_saga_mcp.proxy import refuse_start, run_proxy

    try:
        command, config = _configure(args)
    except (CliError, PolicyError) as err:
        refused = err if isinstance(err, CliError) else CliError(f"tool policy refused: {err}", EXIT_USAGE)
        # An MCP client reads answers, not stderr: its first request is answered with the reason.
        refuse_start(f"agent-saga mcp: {refused}")
        raise refused from None
    try:
        return asyncio.run(run_proxy(config, command))
    except PolicyError as err:
        raise CliError(f"tool policy refused: {err}", EXIT_USAGE) from None
    except json.JSONDecodeError as err:
        raise CliError(f"--emit-policy file is not JSON: {err}", EXIT_UNCHECKED) from None


def _configure(args: argparse.Namespace) -> tuple[list[str], ProxyConfig]:
    """The server command and the proxy's configuration, from the flags (CliError, PolicyError)."""
    command = _checked(args)
    # Only now the MCP SDK: agent_saga_mcp.handler registers mcp.call_tool in this process.
    from agent_saga_mcp.core import BoundaryMode, ProxyConfig
    from agent_saga_mcp.policy import McpPolicy
    from agent_saga_mcp.servers import servers_path

    import_modules(args.imports, "@compensator handlers")  # and the working directory on sys.path
    command, server, name = _server(args.server, command)
    if args.observe:
        emit = Path(args.emit_policy or "saga-policy.json")
        return command, ProxyConfig(server=server, server_name=name, emit_policy=emit, name=args.name)
    policy = McpPolicy.load(args.policy)
    if name is None and any(r.compensate is not None and r.compensate.tool for r in policy.policy.rules):
        print(f"agent-saga mcp: no --server NAME (and no entry of {servers_path()} runs this command): "
              "compensating tool calls can be undone by this proxy only; the recovery daemon will "
              "escalate them", file=sys.stderr, flush=True)
    return command, ProxyConfig(
        server=server, server_name=name, policy=policy, boundary=BoundaryMode(args.boundary),
        name=args.name, wal=open_log_to_write(given_log(args)),
        gate=load_gate(args.gate) if args.gate else None, rollback_grace=args.rollback_grace,
    )


def _server(name: str | None, command: list[str]) -> tuple[list[str], dict[str, Any], str | None]:
    """The command to run, how to start it, and the name to record, from ``--server`` and ``-- COMMAND``.

    A name the host's list holds runs the listed command (a different one after -- is a
    usage error: the daemon would undo its effects on another server). A name it does not
    hold is recorded as given, for a daemon on another host that lists it.
    """
    from agent_saga_mcp.servers import load_servers, name_for, servers_path, valid_name

    try:
        servers = load_servers()
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    if name is None:
        return command, _spec(command, None), name_for(command, None, servers)
    if not valid_name(name):
        raise CliError(f"--server {name!r}: a server name is 1-64 letters, digits, '.', '_' or '-'", EXIT_USAGE)
    entry = servers.get(name)
    if entry is None:
        if not command:
            known = ", ".join(sorted(servers)) or "none"
            raise CliError(f"--server {name}: {servers_path()} lists no such server (it lists: {known}); add it "
                           "there, or give the command after --", EXIT_USAGE)
        print(f"agent-saga mcp: --server {name} is not in {servers_path()} here; the recovery daemon starts the "
              "server of that name from its own host's list", file=sys.stderr, flush=True)
        return command, _spec(command, None), name
    if command and command != list(entry.command):
        raise CliError(f"--server {name} runs {list(entry.command)} per {servers_path()}, not {command}: drop the "
                       "command after -- or make them agree", EXIT_USAGE)
    return list(entry.command), _spec(list(entry.command), entry.cwd), name


def _spec(command: list[str], cwd: str | None) -> dict[str, Any]:
    return {"command": list(command), "cwd": os.path.abspath(cwd or os.getcwd())}


def main(argv: Sequence[str] | None = None) -> int:
    """``agent-saga-mcp [flags] -- COMMAND ...``: the proxy without the ``agent-saga`` front door."""
    from agent_saga.cli.main import main as agent_saga_main

    return agent_saga_main(["mcp", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
