"""Runs the ``agent-saga mcp`` verb (its flags are defined in ``agent_saga.cli.mcp``).

``main()`` is also the ``agent-saga-mcp`` console script: the same flags, without the verb.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.engine.ports import GatePort
from agent_saga.plugins.policy import PolicyError

__all__ = ["load_gate", "main", "run"]


def load_gate(spec: str) -> GatePort:
    """``module:attr`` -> a gate (an attribute that is a gate, or a factory returning one)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--gate takes MODULE:ATTR, got {spec!r}", EXIT_USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
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
    import agent_saga_mcp.handler  # noqa: F401 - registers mcp.call_tool in this process
    from agent_saga.log.file import FileWAL
    from agent_saga_mcp.core import Boundary, ProxyConfig
    from agent_saga_mcp.handler import server_spec
    from agent_saga_mcp.policy import McpPolicy
    from agent_saga_mcp.proxy import run_proxy

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise CliError(f"--import {module}: {err}", EXIT_USAGE) from None
    server = server_spec(list(args.command))
    try:
        if args.observe:
            emit = Path(args.emit_policy or "saga-policy.json")
            config = ProxyConfig(server=server, emit_policy=emit, name=args.name)
        else:
            policy = McpPolicy.load(args.policy)
            gate = load_gate(args.gate) if args.gate else None
            config = ProxyConfig(
                server=server, policy=policy, boundary=Boundary(args.boundary), name=args.name,
                wal=FileWAL(args.wal_path), gate=gate,
            )
            if gate is None:
                from agent_saga.context import default_gate

                config.gate = default_gate()  # the default gate: the kill switch
        return asyncio.run(run_proxy(config, list(args.command)))
    except PolicyError as err:
        raise CliError(f"tool policy refused: {err}", EXIT_USAGE) from None
    except json.JSONDecodeError as err:
        raise CliError(f"--emit-policy file is not JSON: {err}", EXIT_UNCHECKED) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``agent-saga-mcp [flags] -- COMMAND ...``: the proxy without the ``agent-saga`` front door."""
    from agent_saga.cli.main import main as agent_saga_main

    return agent_saga_main(["mcp", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
