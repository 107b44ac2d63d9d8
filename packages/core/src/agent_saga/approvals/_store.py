"""Where requests and decisions live, shared by the agent, the CLI and any web process.

A store offers four operations, each raising ``StoreUnavailable`` when it cannot
be reached or read (which denies: a decision that cannot be read was not given):

* ``create(entry)`` -- put a new request unless one with that id exists; return
  the stored one and whether it was created (atomic: two askers, one request);
* ``get(id)`` -- the request, or None;
* ``update(id, change)`` -- read, change and write one request atomically
  (``change`` returns the new entry, or the same object for "no change");
* ``entries()`` -- every request.

:class:`FileApprovalStore` is the zero-setup default (one host);
``RedisApprovalStore`` serves a fleet.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from agent_saga.approvals._entry import ApprovalEntry, Change
from agent_saga.approvals._errors import ApprovalNotFound
from agent_saga.errors import ConfigurationError
from agent_saga.gate import StoreUnavailable
from agent_saga.gate._files import group_shared, locked, make_dirs, read_state, replace_file

__all__ = [
    "ApprovalStore",
    "Change",
    "FileApprovalStore",
    "default_approvals_dir",
    "find",
    "open_store",
]

_ID = re.compile(r"[0-9a-f]{32}")


@runtime_checkable
class ApprovalStore(Protocol):
    location: str

    def create(self, entry: ApprovalEntry) -> tuple[ApprovalEntry, bool]: ...

    def get(self, request_id: str) -> ApprovalEntry | None: ...

    def update(self, request_id: str, change: Change) -> ApprovalEntry: ...

    def entries(self) -> list[ApprovalEntry]: ...


def default_approvals_dir() -> Path:
    """``$AGENT_SAGA_HOME/approvals``, else ``~/.agent-saga/approvals``."""
    home = os.environ.get("AGENT_SAGA_HOME")
    return (Path(home) if home else Path.home() / ".agent-saga") / "approvals"


def _check_id(request_id: str) -> str:
    if not isinstance(request_id, str) or not _ID.fullmatch(request_id):
        raise ApprovalNotFound(f"{request_id!r} is not an approval request id (32 hex characters)")
    return request_id


class FileApprovalStore:
    """One JSON file per request in a directory the agent and its approvers share.

    Writers hold an exclusive ``flock`` on ``<dir>/.lock``, write a temporary
    file, fsync it and rename it over the old one; readers therefore see a whole
    request or none, and never take the lock. Requests are private to their user
    (files 0600, a directory this creates 0700); to share the store with a group
    of approvers, create its directory group-accessible (e.g. 2770) and new files
    get the group's read/write too. Decided requests stay (they are what a
    retried step finds); remove old files with your usual housekeeping.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_approvals_dir()
        self.location = str(self.path)

    def _file(self, request_id: str) -> Path:
        return self.path / f"{_check_id(request_id)}.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the store's lock; yields the mode for the files written meanwhile."""
        try:
            make_dirs(self.path, 0o700)
            mode = group_shared(self.path, 0o600)
            with locked(self.path / ".lock", mode):
                yield mode
        except OSError as err:
            raise StoreUnavailable(f"cannot use the approval store {self.path}: {err}") from err

    def _read(self, file: Path) -> ApprovalEntry | None:
        text = read_state(file, "approval request")
        if text is None:
            return None
        try:
            return ApprovalEntry.from_json(json.loads(text))
        except ValueError as err:
            raise StoreUnavailable(f"approval request {file} is unreadable ({err}); fix or remove it") from err

    def _write(self, entry: ApprovalEntry, mode: int) -> None:
        replace_file(self._file(entry.id), json.dumps(entry.to_json(), indent=1, sort_keys=True) + "\n", mode)

    def create(self, entry: ApprovalEntry) -> tuple[ApprovalEntry, bool]:
        file = self._file(entry.id)
        with self._locked() as mode:
            existing = self._read(file)
            if existing is not None:
                return existing, False
            self._write(entry, mode)
            return entry, True

    def get(self, request_id: str) -> ApprovalEntry | None:
        return self._read(self._file(request_id))

    def update(self, request_id: str, change: Change) -> ApprovalEntry:
        file = self._file(request_id)
        with self._locked() as mode:
            current = self._read(file)
            if current is None:
                raise ApprovalNotFound(f"no approval request {request_id} in {self.location}")
            new = change(current)
            if new is not current:
                self._write(new, mode)
            return new

    def entries(self) -> list[ApprovalEntry]:
        try:
            names = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []  # nobody has asked for anything yet
        except OSError as err:
            raise StoreUnavailable(f"cannot list the approval store {self.path}: {err}") from err
        found = []
        for name in names:
            if name.endswith(".json") and _ID.fullmatch(name[:-5]):
                entry = self._read(self.path / name)
                if entry is not None:
                    found.append(entry)
        return found

    def __repr__(self) -> str:
        return f"FileApprovalStore({self.location!r})"


def find(store: ApprovalStore, ref: str) -> ApprovalEntry:
    """The request whose id is ``ref`` or starts with it; ApprovalNotFound if none or several."""
    ref = (ref or "").strip().rstrip(".").lower()  # people paste the "af83c011..." they were shown
    if len(ref) < 4 or not re.fullmatch(r"[0-9a-f]+", ref):
        raise ApprovalNotFound(
            f"{ref!r} is not a request id: give the id shown by 'agent-saga approvals list' (at least 4 hex characters)"
        )
    if len(ref) == 32:
        entry = store.get(ref)
        if entry is None:
            raise ApprovalNotFound(f"no approval request {ref} in {store.location}")
        return entry
    matches = [e for e in store.entries() if e.id.startswith(ref)]
    if not matches:
        raise ApprovalNotFound(f"no approval request starts with {ref!r} in {store.location}")
    if len(matches) > 1:
        raise ApprovalNotFound(
            f"{ref!r} matches {len(matches)} requests ({', '.join(e.id[:12] for e in matches)}): give more characters"
        )
    return matches[0]


def open_store(target: str | None) -> ApprovalStore:
    """A store from a path or a ``redis://`` URL (default: ``$AGENT_SAGA_APPROVALS``, else the file store)."""
    target = target or os.environ.get("AGENT_SAGA_APPROVALS") or None
    if target and target.startswith(("redis://", "rediss://", "unix://")):
        from agent_saga.approvals._redis_store import RedisApprovalStore

        return RedisApprovalStore(target)
    if target is not None and not target.strip():
        raise ConfigurationError("--store is empty: give a directory or a redis:// URL")
    return FileApprovalStore(target)
