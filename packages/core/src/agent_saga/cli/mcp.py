"""``agent-saga mcp``: the MCP stdio proxy, defined here and run by ``agent-saga-mcp``.

The flags live in the core so that ``agent-saga mcp --help`` works everywhere; running
the proxy needs the ``agent-saga-mcp`` distribution (and with it the ``mcp`` SDK), which
this module imports only when the verb runs. Without it the verb exits 3 and says what to
install.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError

__all__ = ["add_arguments", "register"]

_EXAMPLES = (
    "examples:\n"
    "  agent-saga mcp --observe --emit-policy saga-policy.json -- python -m my_mcp_server\n"
    "  agent-saga mcp --policy saga-policy.json -- python -m my_mcp_server\n"
    "  agent-saga mcp --policy saga-policy.json --boundary explicit -- npx some-mcp-server\n"
    "recover what a killed proxy left open:\n"
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
    p.add_argument("--wal-path", default=None,
                   help="the log (default: $AGENT_SAGA_WAL, else ./agent-saga.wal)")
    p.add_argument("--gate", metavar="MODULE:ATTR", default=None,
                   help="a gate object (or a zero-argument factory) to check each call, e.g. myapp.gates:payments")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (its @compensator handlers, for compensate.handler entries)")
    p.add_argument("--name", default="mcp", help="the saga name in the log (default: %(default)s)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="the MCP server to run over stdio, after --")


def register(verbs: Any) -> None:
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
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CliError("name the server command after --, e.g. -- python -m my_mcp_server", EXIT_USAGE)
    if not args.observe and not args.policy:
        raise CliError("say --observe (learn the tools) or --policy FILE (enforce one)", EXIT_USAGE)
    if args.emit_policy and not args.observe:
        raise CliError("--emit-policy goes with --observe", EXIT_USAGE)
    args.command = command
    args.wal_path = args.wal_path or os.environ.get("AGENT_SAGA_WAL") or "agent-saga.wal"
    try:
        cli = importlib.import_module("agent_saga_mcp.cli")
    except ModuleNotFoundError as err:
        if err.name and (err.name == "mcp" or err.name.startswith(("agent_saga_mcp", "mcp."))):
            raise CliError(
                f"the MCP proxy needs the agent-saga-mcp distribution ({err.name} is missing): "
                "pip install agent-saga-mcp", EXIT_UNCHECKED,
            ) from None
        raise
    return int(cli.run(args))
