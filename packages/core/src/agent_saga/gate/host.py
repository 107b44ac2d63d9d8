"""The host-wide locations: one kill switch and one list of trusted approver keys per host.

* ``/var/lib/agent-saga/`` holds the kill switch (``switch.json``): state every
  process on the host reads, whatever user it runs as; operators write it.
* ``/etc/agent-saga/`` holds ``approver-keys``, the public keys whose signatures
  make an approval count, and ``approver-passkeys``, the registered passkeys:
  configuration only root changes.

Every trust list there is read by :func:`read_host_list` (the kernel's, in
:mod:`agent_saga.notekeys`, named here too for the lists other distributions keep beside
them, such as the MCP server list) under one rule: owned by root or the reader, writable by
nobody else, a symlink judged by where it leads.

Neither location depends on the environment of the process reading it, so an agent
cannot move its switch or its trust anchors by setting a variable -- with one
exception, ``AGENT_SAGA_HOST_ROOT``, which re-roots both (``$ROOT/var/lib/agent-saga``,
``$ROOT/etc/agent-saga``) so that a test suite never touches the real host. Its use
is logged as a warning and recorded with every saga (``switch_posture``).
"""

from __future__ import annotations

import grp
import logging
import os
from pathlib import Path

from agent_saga.errors import ConfigurationError
from agent_saga.notekeys import read_host_list

__all__ = [
    "APPROVER_KEYS",
    "APPROVER_PASSKEYS",
    "CONFIG_DIR",
    "HOST_ROOT_ENV",
    "STATE_DIR",
    "config_dir",
    "init_host",
    "read_host_list",
    "relocated",
    "state_dir",
]

HOST_ROOT_ENV = "AGENT_SAGA_HOST_ROOT"
STATE_DIR = Path("/var/lib/agent-saga")
CONFIG_DIR = Path("/etc/agent-saga")
#: The trusted approver keys, one per line, in CONFIG_DIR.
APPROVER_KEYS = "approver-keys"
#: The registered passkeys (agent_saga.approvals._passkey), one JSON line each, in CONFIG_DIR.
APPROVER_PASSKEYS = "approver-passkeys"

log = logging.getLogger("agent_saga.gate.host")
_warned: set[str] = set()


def relocated() -> str | None:
    """``AGENT_SAGA_HOST_ROOT=<root>`` when the host locations are moved, else None."""
    root = os.environ.get(HOST_ROOT_ENV)
    if not root:
        return None
    if root not in _warned:
        _warned.add(root)
        log.warning("%s=%s: the host-wide kill switch and trusted approver keys are read under %s, not from "
                    "the host (meant for tests; every saga records it)", HOST_ROOT_ENV, root, root)
    return f"{HOST_ROOT_ENV}={root}"


def _under_root(path: Path) -> Path:
    root = os.environ.get(HOST_ROOT_ENV)
    if root:
        relocated()
        return Path(root) / path.relative_to("/")
    return path


def state_dir() -> Path:
    """Where the host's kill switch lives (``/var/lib/agent-saga``)."""
    return _under_root(STATE_DIR)


def config_dir() -> Path:
    """Where the host's trusted approver keys live (``/etc/agent-saga``)."""
    return _under_root(CONFIG_DIR)


def init_host(group: str | None = None) -> list[str]:
    """Create (or fix) the host locations; return one line per location saying what it is now.

    The state directory is 0755 (every user reads the switch; root writes it), or
    2775 owned by ``group`` so that the operators in that group can pull levers
    without root (the set-group-id bit gives every file in it that group). The
    config directory and the key list are 0755 / 0644 and stay root's: trusting a
    key is granting the power to approve. Raises OSError (run it as root).
    """
    gid = -1
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ConfigurationError(f"no group {group!r} on this host: create it (groupadd {group}) first") from None
    state, config = state_dir(), config_dir()
    state.mkdir(parents=True, exist_ok=True)
    os.chown(state, -1, gid)
    state.chmod(0o2775 if group is not None else 0o755)
    config.mkdir(parents=True, exist_ok=True)
    config.chmod(0o755)
    keys = config / APPROVER_KEYS
    keys.touch(exist_ok=True)
    keys.chmod(0o644)
    passkeys = config / APPROVER_PASSKEYS
    passkeys.touch(exist_ok=True)
    passkeys.chmod(0o644)
    writers = f"its owner and group {group}" if group is not None else "its owner"
    return [
        f"{state}: the kill switch; mode {0o2775 if group is not None else 0o755:o}, written by {writers}, "
        "read by everyone",
        f"{keys}: trusted approver keys; mode 644, changed by its owner only (agent-saga approvals trust)",
        f"{passkeys}: registered passkeys; mode 644, changed by its owner only (agent-saga approvals trust-passkey)",
    ]
