"""Which merged mesh log recovers each device's part of a saga: one per host, so no undo runs from two views.

The recovery daemon keeps its ledger beside the log it recovers. A merged mesh log
(``agent_saga.mesh``) is one view of the devices' logs; merging them again gives
another file with another ledger beside it, and recovering that one would run every
undo a second time with the same keys. So before a daemon unwinds a saga of a merged
log, it registers each device's part of that saga, (device, saga), to its log in the
host's state directory (``/var/lib/agent-saga/mesh-recovered/``, under
``$AGENT_SAGA_HOST_ROOT`` if set; the kill switch's directory, which operators write
and agents do not). The first log to register a part keeps it: a daemon on any other
merged log refuses that saga, escalated as ``mesh-recovered-elsewhere`` and naming
the log of record, and writes nothing to its own log. Parts are registered in one
order (sorted device ids), so two daemons racing on two views cannot split a saga.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from agent_saga.errors import ConfigurationError
from agent_saga.inert import inert
from agent_saga.log.fs import write_new

__all__ = ["REGISTER", "recovered_elsewhere", "register_dir"]

#: The register's directory, in the host's state directory.
REGISTER = "mesh-recovered"
# gate.host names the same directory; the kernel may not import a wing.
_STATE_DIR = Path("/var/lib/agent-saga")
_HOST_ROOT_ENV = "AGENT_SAGA_HOST_ROOT"


def register_dir() -> Path:
    """Where the register lives: ``/var/lib/agent-saga/mesh-recovered`` (under ``$AGENT_SAGA_HOST_ROOT`` if set)."""
    root = os.environ.get(_HOST_ROOT_ENV)
    base = Path(root) / _STATE_DIR.relative_to("/") if root else _STATE_DIR
    return base / REGISTER


def _holder(entry: Path) -> str:
    try:
        held = json.loads(entry.read_bytes())
    except (OSError, ValueError) as err:
        raise ConfigurationError(f"cannot read the mesh recovery register entry {entry}: {err}") from None
    log = held.get("log") if isinstance(held, dict) else None
    if not isinstance(log, str):
        raise ConfigurationError(f"the mesh recovery register entry {entry} names no log: remove it by hand")
    return log


def recovered_elsewhere(log: Path, saga: str, devices: Iterable[str], *, claim: bool) -> str:
    """The merged log that already recovers a part of ``saga`` ('' when none but ``log`` does).

    With ``claim``, every part no log holds yet is registered to ``log`` (the first writer wins);
    without it (a dry run), nothing is written. ConfigurationError (one line) when the register
    cannot be read or written.
    """
    me = os.path.realpath(log)
    base = register_dir()
    for device in sorted(set(devices)):
        entry = base / hashlib.sha256(f"{device}\n{saga}".encode()).hexdigest()
        if not entry.exists():
            if not claim:
                continue
            try:
                base.mkdir(parents=True, exist_ok=True)
                tmp = base / f".{entry.name}.{os.getpid()}"
                tmp.unlink(missing_ok=True)
                write_new(tmp, [json.dumps({"log": me, "saga": saga, "device": device}).encode()], 0o644)
                try:
                    os.link(tmp, entry)  # atomic, and only if no other daemon registered it first
                    continue
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink(missing_ok=True)
            except OSError as err:
                raise ConfigurationError(
                    f"cannot register which merged log recovers saga {inert(saga)} in {base}: {err}; run the daemon "
                    "as a user that may write the host's state directory (agent-saga init-host --group GROUP)"
                ) from None
        holder = _holder(entry)
        if holder != me:
            return holder
    return ""
