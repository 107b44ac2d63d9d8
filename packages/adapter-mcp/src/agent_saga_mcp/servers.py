"""The MCP servers a reader may start, by name: the host's ``/etc/agent-saga/mcp-servers.json``.

A compensating tool call is recorded in the log as ``mcp.call_tool`` with the *name* of
the server to call (``{"server": "payments", "tool": ..., "arguments": ...}``). The log
is written by the agent, so it never says how to start anything: the command, its working
directory and the call's timeout come from this file, which belongs to the operator of
the process that reads the log (the recovery daemon)::

    {"servers": {"payments": {"command": ["python", "-m", "my_mcp_server"], "cwd": "/srv/app",
                              "timeout": 120}}}

It lives beside the trusted approver keys (:func:`agent_saga.gate.host.config_dir`, so
``AGENT_SAGA_HOST_ROOT`` re-roots it for tests) and, like them, is configuration only its
owner changes. Because what it names is run by whoever reads it (often root), it is read
by the host's one trust-list reader (:func:`agent_saga.gate.host.read_host_list`, the rule
the approver and operator keys and the passkeys are held to): the file, its directory and
every directory above owned by root or by the reading user, the file and its directory
writable by nobody else, a symlink judged by where it leads; otherwise reading it fails with
the one-line fix.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga import ConfigurationError
from agent_saga.gate.host import config_dir, read_host_list

__all__ = ["SERVERS_FILE", "ServerEntry", "load_servers", "name_for", "servers_path", "valid_name"]

#: The file, in the host's configuration directory.
SERVERS_FILE = "mcp-servers.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One stdio MCP server the host's operator configured, under its name."""

    name: str
    command: tuple[str, ...]
    cwd: str | None = None
    timeout: float = _DEFAULT_TIMEOUT


def servers_path() -> Path:
    """``/etc/agent-saga/mcp-servers.json`` (under ``$AGENT_SAGA_HOST_ROOT`` when that is set)."""
    return config_dir() / SERVERS_FILE


def valid_name(value: object) -> bool:
    """Whether ``value`` can name a server: 1-64 of letters, digits, ``.``, ``_``, ``-``."""
    return isinstance(value, str) and _NAME.match(value) is not None


def load_servers(path: str | os.PathLike[str] | None = None) -> dict[str, ServerEntry]:
    """The configured servers by name (default file: :func:`servers_path`); none if the file does not exist.

    Raises ConfigurationError naming the file and the fix when it is not JSON of the
    documented shape, or when its owner or mode would let someone else choose what runs.
    """
    file = Path(path) if path is not None else servers_path()
    text = read_host_list(file, "the MCP servers listed in")
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError as err:
        raise ConfigurationError(f"the MCP server list {file} is not JSON: {err}") from None
    servers = data.get("servers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise ConfigurationError(
            f'the MCP server list {file} must be {{"servers": {{"<name>": {{"command": [...], "cwd": "..."}}}}}}'
        )
    return {name: _entry(file, name, spec) for name, spec in servers.items()}


def _entry(file: Path, name: str, spec: Any) -> ServerEntry:
    where = f"{file}: servers[{name!r}]"
    if not valid_name(name):
        raise ConfigurationError(f"{where}: a server name is 1-64 letters, digits, '.', '_' or '-'")
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f'{where} must be an object: {{"command": [...], "cwd": "..."}}')
    unknown = sorted(set(spec) - {"command", "cwd", "timeout"})
    if unknown:
        raise ConfigurationError(f"{where} has unknown keys {unknown} (known: command, cwd, timeout)")
    command = spec.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(p, str) and p for p in command):
        raise ConfigurationError(f"{where}.command must be a non-empty list of strings, e.g. [\"python\", \"-m\", \"srv\"]")
    cwd = spec.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and os.path.isabs(cwd)):
        raise ConfigurationError(f"{where}.cwd must be an absolute path, got {cwd!r}")
    timeout = spec.get("timeout", _DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 86400:
        raise ConfigurationError(f"{where}.timeout must be a number of seconds between 0 and 86400, got {timeout!r}")
    return ServerEntry(name, tuple(command), cwd, float(timeout))


def name_for(command: Sequence[str], cwd: str | None, servers: Mapping[str, ServerEntry]) -> str | None:
    """The name of the configured server started by exactly ``command`` in ``cwd``, if there is one."""
    here = os.path.abspath(cwd or os.getcwd())
    for entry in servers.values():
        if list(entry.command) == list(command) and os.path.abspath(entry.cwd or here) == here:
            return entry.name
    return None
