"""The kill switch: halt, drain, quarantine, resume -- levers for an operator in an incident.

* HALT refuses new steps, globally (``global``) or for ``tool:NAME``,
  ``tool:prefix.*`` or ``tag:X``. Every halt carries a TTL: a halt nobody
  remembers to lift becomes an outage of its own.
* DRAIN refuses new sagas (at ``admit``) and lets running ones finish; blocking
  their remaining steps would strand each one half done.
* QUARANTINE freezes one saga: its next step raises ``SagaQuarantined``, which
  stops it *without* a rollback, and ``is_quarantined`` tells the recovery daemon
  to leave it alone until a human resumes it.
* RESUME lifts any of them.

The state lives in a :class:`SwitchStore` every process reads. Every switch also
reads the host's own store, ``/var/lib/agent-saga/switch.json`` (see
:mod:`agent_saga.gate.host`), unless built with ``host=False``: an operator's halt
on a host reaches every process on it, whatever user, home directory or
environment it runs with. :func:`switch_posture` tells a saga's start record which
stores it honours. Reads are cached for ``poll_interval`` seconds, so a change
reaches a running process within that delay. When a store cannot be read, the
last state read is honoured for ``grace`` seconds, then every step is refused (fail
closed). Neither "open" (anyone who can take the store down bypasses the switch)
nor "closed at once" (a store blip halts the fleet); ``grace=0`` chooses the second
on purpose.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent_saga.engine.ports import SagaInfo, StepRequest
from agent_saga.errors import ConfigurationError, SagaQuarantined, StepRefused
from agent_saga.gate._files import group_shared, locked, make_dirs, read_state, replace_file
from agent_saga.gate._stores import StoreUnavailable
from agent_saga.gate._switch_state import Halt, Quarantine, SwitchState, _halt_json, parse_scope
from agent_saga.gate.host import HOST_ROOT_ENV, relocated, state_dir
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument
from agent_saga.log.records import AUDIT_SAGA, RecordType

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_TTL",
    "OPERATOR_SAGA",
    "SWITCH_ENV",
    "FileSwitchStore",
    "Halt",
    "KillSwitch",
    "Quarantine",
    "SwitchState",
    "SwitchStore",
    "changed_settings",
    "default_switch",
    "default_switch_path",
    "open_switch_store",
    "parse_scope",
    "set_switch",
    "switch_posture",
    "switch_settings",
]

log = logging.getLogger("agent_saga.gate.switch")

DEFAULT_TTL = 3600.0
DEFAULT_POLL_INTERVAL = 0.1
DEFAULT_GRACE = 30.0
#: Names a store the process-wide switch obeys besides the host's (see default_switch).
SWITCH_ENV = "AGENT_SAGA_SWITCH"
#: The ``saga`` field of log records about the whole fleet (halt, drain, resume):
#: the log's id for "no saga", which readers that fold sagas skip.
OPERATOR_SAGA = AUDIT_SAGA


@runtime_checkable
class SwitchStore(Protocol):
    """Shared switch state. ``load`` and ``update`` raise StoreUnavailable when unreachable."""

    location: str

    def load(self) -> SwitchState: ...

    def update(self, change: Callable[[SwitchState], SwitchState]) -> SwitchState: ...

    def is_quarantined(self, saga_id: str) -> bool: ...


SWITCH_FILE = "switch.json"


def default_switch_path() -> Path:
    """The host-wide switch: ``/var/lib/agent-saga/switch.json`` (see agent_saga.gate.host)."""
    return state_dir() / SWITCH_FILE


class FileSwitchStore:
    """The switch as a JSON file every process on this host reads (the host-wide default).

    Writers take an exclusive lock on ``<path>.lock``, write a temporary file,
    fsync it and rename it over the old one, so a reader sees the old state or
    the new one, never half of either. The file is 0644 (every user's agent must
    read it; it holds no secret); a directory this creates is 0755. Readers
    read the file at every poll and parse it only when its text changed. It stops
    processes on *this host*; a fleet needs ``RedisSwitchStore``.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_switch_path()
        self.location = str(self.path)
        self._text: str | None = None
        self._cached = SwitchState()
        self._lock = threading.Lock()

    def load(self) -> SwitchState:
        # Compared by its text, not by (inode, mtime, size): a filesystem reuses a freed
        # inode for the next write's file (ext4 did, every time), and two writes of one
        # size within one mtime tick then look unchanged, which would hide a halt.
        text = read_state(self.path, "switch file")
        if text is None:
            return SwitchState()  # nobody has ever pulled a lever: nothing halted
        with self._lock:
            if text == self._text:
                return self._cached
        state = self._parse(text)
        with self._lock:
            self._text, self._cached = text, state
        return state

    def _read(self) -> SwitchState:
        text = read_state(self.path, "switch file")
        return SwitchState() if text is None else self._parse(text)

    def _parse(self, text: str) -> SwitchState:
        try:
            return SwitchState.from_json(json.loads(text))
        except (ValueError, TypeError) as err:
            raise StoreUnavailable(
                f"switch file {self.path} is not a valid switch state ({err}); fix or remove it"
            ) from err

    def update(self, change: Callable[[SwitchState], SwitchState]) -> SwitchState:
        directory = self.path.parent
        try:
            make_dirs(directory, 0o755)
            with locked(self.path.with_name(self.path.name + ".lock"), group_shared(directory, 0o600)):
                state = change(self._read())
                replace_file(self.path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n", 0o644)
                return state
        except OSError as err:
            raise StoreUnavailable(f"cannot write switch file {self.path}: {err}") from err

    def is_quarantined(self, saga_id: str) -> bool:
        return any(q.saga_id == saga_id for q in self.load().quarantined)

    def __repr__(self) -> str:
        return f"FileSwitchStore({self.location!r})"


class _View:
    """A state compiled for the hot path: with nothing set, a check is two attribute reads."""

    __slots__ = ("drain", "empty", "global_halt", "globs", "quarantined", "tags", "tools")

    def __init__(self, state: SwitchState) -> None:
        self.global_halt: Halt | None = None
        self.tools: dict[str, Halt] = {}
        self.globs: list[tuple[str, Halt]] = []
        self.tags: dict[str, Halt] = {}
        # Sorted by expiry, so that when several stores halt one scope the longest-lived wins.
        for h in sorted(state.halts, key=lambda h: h.expires_at):
            kind, _, name = h.scope.partition(":")
            if h.scope == "global":
                self.global_halt = h
            elif kind == "tool" and any(c in name for c in "*?["):
                self.globs.append((name, h))
            elif kind == "tool":
                self.tools[name] = h
            elif kind == "tag":
                self.tags[name] = h
        self.drain = state.drain
        self.quarantined = {q.saga_id: q for q in state.quarantined}
        self.empty = not (state.halts or state.drain or state.quarantined)

    def halt_for(self, tool: str, tags: frozenset[str], now: float) -> Halt | None:
        h = self.global_halt
        if h is not None and h.live(now):
            return h
        h = self.halt_naming(tool, now)
        if h is not None:
            return h
        if self.tags:
            for tag in tags:
                h = self.tags.get(tag)
                if h is not None and h.live(now):
                    return h
        return None

    def halt_naming(self, tool: str, now: float) -> Halt | None:
        """A live halt whose scope names ``tool`` itself (``tool:NAME`` or a ``tool:`` pattern)."""
        h = self.tools.get(tool)
        if h is not None and h.live(now):
            return h
        for pattern, h in self.globs:
            if h.live(now) and fnmatch.fnmatchcase(tool, pattern):
                return h
        return None


def _message(h: Halt, now: float) -> str:
    return f"halted ({h.scope}) by {h.by}: {h.reason}; expires in {max(0.0, h.expires_at - now):.0f}s"


class KillSwitch:
    """Reads switch stores for the gate, and pulls the levers of one of them for an operator.

    ``store`` is the one an operator changes through this object (default: the
    host's). The gate honours it *and* the host's store, unless ``host=False`` --
    an opt-out that :func:`switch_posture` reports with every saga.
    """

    def __init__(
        self,
        store: SwitchStore | None = None,
        *,
        host: bool = True,
        grace: float = DEFAULT_GRACE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        wal: WAL | str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        for label, value in (("grace", grace), ("poll_interval", poll_interval)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"KillSwitch {label}= must be a number of seconds >= 0, got {value!r}")
        if store is None:
            store = FileSwitchStore()
        if not isinstance(store, SwitchStore):
            raise ConfigurationError(f"KillSwitch needs a switch store (FileSwitchStore, RedisSwitchStore), got {store!r}")
        self.store = store
        self.host = bool(host)
        #: Every store whose levers this switch obeys; the first is ``store``.
        self.sources: tuple[SwitchStore, ...] = (store,)
        if self.host and store.location != str(default_switch_path()):
            self.sources += (FileSwitchStore(),)
        self.grace = float(grace)
        self.poll_interval = float(poll_interval)
        self.wal = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
        self._clock = clock
        self._wall = wall
        self._view = _View(SwitchState())
        self._good_at: float | None = None  # clock time of the last successful read
        self._failure: StoreUnavailable | None = None
        self._next_poll = float("-inf")
        self._lock = threading.Lock()
        self._posture: tuple[str | None, dict[str, Any]] | None = None  # see switch_posture

    # -- the gate's side ------------------------------------------------------------------

    def _current(self, tool: str) -> _View:
        now = self._clock()
        if now >= self._next_poll:
            self._refresh(now)
        if self._failure is not None:
            good = self._good_at
            if good is None or now - good > self.grace:
                since = "never read" if good is None else f"unreadable for {now - good:.1f}s"
                raise StepRefused(
                    tool,
                    f"kill switch store {', '.join(s.location for s in self.sources)} {since} (grace {self.grace:g}s): "
                    f"refusing every step until it can be read ({self._failure})",
                    "kill-switch",
                )
        return self._view

    def _refresh(self, now: float) -> None:
        with self._lock:
            if now < self._next_poll:
                return
            try:
                state = _merge([source.load() for source in self.sources])
            except StoreUnavailable as err:
                if self._failure is None:
                    log.warning("kill switch store unreachable; honouring the last state for %gs: %s", self.grace, err)
                self._failure = err
            else:
                if self._failure is not None:
                    log.warning("kill switch stores %s readable again", ", ".join(s.location for s in self.sources))
                self._view, self._good_at, self._failure = _View(state), now, None
            self._next_poll = now + self.poll_interval

    def check(self, request: StepRequest) -> None:
        """Raise SagaQuarantined or StepRefused if an operator said stop; else return."""
        if self._failure is None and self._clock() < self._next_poll and self._view.empty:
            return  # every step asks: the usual answer (read recently, nothing set) at once
        view = self._current(request.tool)
        if view.empty:
            return
        q = view.quarantined.get(request.saga_id)
        if q is not None:
            raise SagaQuarantined(
                f"saga {request.saga_id} is quarantined by {q.by}: {q.reason}. It is frozen, not rolled "
                f"back; `agent-saga resume --saga {request.saga_id} --by WHO` releases it"
            )
        now = self._wall()
        h = view.halt_for(request.tool, request.tags, now)
        if h is not None:
            raise StepRefused(request.tool, _message(h, now), "kill-switch")

    def check_undo(self, request: StepRequest) -> None:
        """Raise StepRefused if a live halt names this undo (``request.tool``: its handler's name).

        Undos run under a global or tag halt: a halt is pulled to stop new effects,
        and unwinding one reduces what stands. Only a halt that names the undo's own
        tool (``tool:NAME`` or a matching ``tool:prefix.*``) stops it. An unreadable
        store does not stop an undo either: the last state read is honoured, since
        failing closed here would strand every rollback during a store outage.
        """
        now = self._clock()
        if now >= self._next_poll:
            self._refresh(now)
        view = self._view
        if view.empty:
            return
        wall = self._wall()
        h = view.halt_naming(request.tool, wall)
        if h is not None:
            raise StepRefused(request.tool, _message(h, wall), "kill-switch")

    def admit(self, saga: SagaInfo) -> None:
        """Refuse a new saga during a drain, a global halt, or a halt on one of its tags."""
        view = self._current(f"saga:{saga.name}")
        if view.empty:
            return
        q = view.quarantined.get(saga.saga_id)
        if q is not None:
            raise SagaQuarantined(f"saga {saga.saga_id} is quarantined by {q.by}: {q.reason}")
        now = self._wall()
        if view.drain is not None and view.drain.live(now):
            d = view.drain
            raise StepRefused(
                f"saga:{saga.name}",
                f"draining (by {d.by}: {d.reason}); no new sagas for {max(0.0, d.expires_at - now):.0f}s",
                "drain",
            )
        for h in [view.global_halt, *(view.tags.get(t) for t in saga.tags)]:
            if h is not None and h.live(now):
                raise StepRefused(f"saga:{saga.name}", _message(h, now), "kill-switch")

    def is_quarantined(self, saga_id: str) -> bool:
        """For the recovery daemon: leave this saga alone. Raises StoreUnavailable if unknown."""
        return any(source.is_quarantined(saga_id) for source in self.sources)

    # -- the operator's side ----------------------------------------------------------------

    def _apply(self, change: Callable[[SwitchState], SwitchState]) -> SwitchState:
        state = self.store.update(lambda s: change(s.live(self._wall())))
        with self._lock:
            self._next_poll = float("-inf")
        self._refresh(self._clock())  # this process obeys its own lever at once
        return state

    def _log(self, rtype: RecordType, saga: str, body: dict[str, Any]) -> None:
        if self.wal is None:
            return
        ticket = self.wal.append(rtype.value, saga, {"store": self.store.location, **body})
        self.wal.barrier(ticket)

    def halt(self, scope: str = "global", *, reason: str, by: str, ttl: float = DEFAULT_TTL) -> Halt:
        """Refuse new steps in ``scope`` for ``ttl`` seconds (replacing a halt on the same scope)."""
        scope = parse_scope(scope)
        halt = Halt(scope, _required("reason", reason), _required("by", by), self._wall(), self._expiry(ttl))
        self._apply(lambda s: replace(s, halts=(*[h for h in s.halts if h.scope != scope], halt)))
        self._log(RecordType.SWITCH_HALTED, OPERATOR_SAGA, {**_halt_json(halt), "ttl": float(ttl)})
        return halt

    def drain(self, *, reason: str, by: str, ttl: float = DEFAULT_TTL) -> Halt:
        """Admit no new sagas for ``ttl`` seconds; running ones continue."""
        halt = Halt("drain", _required("reason", reason), _required("by", by), self._wall(), self._expiry(ttl))
        self._apply(lambda s: replace(s, drain=halt))
        self._log(RecordType.SWITCH_DRAINED, OPERATOR_SAGA, {**_halt_json(halt), "ttl": float(ttl)})
        return halt

    def quarantine(self, saga_id: str, *, reason: str, by: str) -> Quarantine:
        """Freeze ``saga_id``: no further steps, no rollback, no recovery, until resumed."""
        if not isinstance(saga_id, str) or not saga_id.strip():
            raise ConfigurationError(f"quarantine needs a saga id, got {saga_id!r}")
        q = Quarantine(saga_id.strip(), _required("reason", reason), _required("by", by), self._wall())
        self._apply(lambda s: replace(
            s, quarantined=(*[x for x in s.quarantined if x.saga_id != q.saga_id], q)
        ))
        self._log(RecordType.SWITCH_QUARANTINED, q.saga_id, {"reason": q.reason, "by": q.by, "at": q.at})
        return q

    def resume(
        self,
        scope: str | None = None,
        *,
        by: str,
        drain: bool = False,
        saga_id: str | None = None,
        reason: str = "",
    ) -> int:
        """Lift the halt on ``scope``, the drain, and/or a quarantine; returns how many were lifted."""
        by = _required("by", by)
        if scope is None and not drain and saga_id is None:
            raise ConfigurationError("resume needs what to lift: a scope, drain=True or saga_id=")
        target = parse_scope(scope) if scope is not None else None
        lifted: list[str] = []

        def change(s: SwitchState) -> SwitchState:
            lifted.clear()
            halts = tuple(h for h in s.halts if h.scope != target)
            lifted.extend(h.scope for h in s.halts if h.scope == target)
            new_drain = s.drain
            if drain and s.drain is not None:
                lifted.append("drain")
                new_drain = None
            quarantined = tuple(q for q in s.quarantined if q.saga_id != saga_id)
            lifted.extend(f"saga:{q.saga_id}" for q in s.quarantined if q.saga_id == saga_id)
            return SwitchState(halts, new_drain, quarantined)

        self._apply(change)
        when = self._wall()
        fleet = [x for x in lifted if not x.startswith("saga:")]
        if fleet:
            self._log(RecordType.SWITCH_RESUMED, OPERATOR_SAGA, {
                "lifted": fleet, "by": by, "reason": reason, "at": when,
            })
        if saga_id is not None and f"saga:{saga_id}" in lifted:
            # Under the saga's own id, so that a reader of the log (the recovery
            # daemon) sees the quarantine end where it began.
            self._log(RecordType.SWITCH_RESUMED, saga_id, {
                "lifted": [f"saga:{saga_id}"], "by": by, "reason": reason, "at": when,
            })
        return len(lifted)

    def status(self) -> SwitchState:
        """The live state, read from the store now (raises StoreUnavailable)."""
        return self.store.load().live(self._wall())

    def _expiry(self, ttl: float) -> float:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
            raise ConfigurationError(f"ttl must be a positive number of seconds (every halt expires), got {ttl!r}")
        return self._wall() + float(ttl)

    def __repr__(self) -> str:
        return (f"KillSwitch({self.store!r}, host={self.host}, grace={self.grace:g}, "
                f"poll_interval={self.poll_interval:g})")


def _merge(states: list[SwitchState]) -> SwitchState:
    """Every lever pulled in any store: an operator's halt anywhere is a halt here."""
    if len(states) == 1:
        return states[0]
    drains = [s.drain for s in states if s.drain is not None]
    return SwitchState(
        halts=tuple(h for s in states for h in s.halts),
        drain=max(drains, key=lambda d: d.expires_at) if drains else None,
        quarantined=tuple(q for s in states for q in s.quarantined),
    )


def _required(label: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{label} is required: a lever pulled without saying {'who' if label == 'by' else 'why'} "
            "leaves an audit trail that proves nothing"
        )
    return value.strip()


_switch_lock = threading.Lock()
_explicit: KillSwitch | None = None
_by_location: dict[tuple[str, str], KillSwitch] = {}
# (host root setting, switch setting, switch): replaced as one tuple so readers never see a mix.
_env: tuple[str | None, str | None, KillSwitch] | None = None


def set_switch(switch: KillSwitch | None) -> None:
    """The switch every gate consults unless given one; None restores the default (see default_switch)."""
    global _explicit
    if switch is not None and not isinstance(switch, KillSwitch):
        raise ConfigurationError(f"set_switch() needs a KillSwitch, got {switch!r}")
    if switch is not None and all(isinstance(source, FileSwitchStore) for source in switch.sources):
        # Said loudly because it is the mistake that matters in an incident: a
        # halt that reaches one host is not a fleet-wide stop.
        log.warning(
            "kill switch %s is a file: it stops processes on this host only; "
            "use RedisSwitchStore for anything running on more than one host", switch.store.location,
        )
    with _switch_lock:
        _explicit = switch


def default_switch() -> KillSwitch:
    """The process-wide switch.

    Unless ``set_switch`` chose one: the host's FileSwitchStore, plus the store
    ``$AGENT_SAGA_SWITCH`` names (a ``redis://`` URL for a fleet, or a file path)
    if it is set. The variable adds a store; it never replaces the host's.
    """
    explicit = _explicit
    if explicit is not None:
        return explicit
    global _env
    root, url = os.environ.get(HOST_ROOT_ENV), os.environ.get(SWITCH_ENV) or None
    env = _env
    if env is not None and env[0] == root and env[1] == url:
        return env[2]
    with _switch_lock:
        host = str(default_switch_path())
        switch = _by_location.get((url or host, host))
        if switch is None:
            switch = _by_location[(url or host, host)] = KillSwitch(open_switch_store(url))
        _env = (root, url, switch)
        return switch


def switch_settings() -> dict[str, str | None]:
    """What chooses the process-wide switch now: the two variables, and a ``set_switch`` override."""
    explicit = _explicit
    return {
        HOST_ROOT_ENV: os.environ.get(HOST_ROOT_ENV) or None,
        SWITCH_ENV: os.environ.get(SWITCH_ENV) or None,
        "set_switch": repr(explicit) if explicit is not None else None,
    }


def changed_settings(old: dict[str, str | None], new: dict[str, str | None]) -> list[dict[str, str | None]]:
    """Which of :func:`switch_settings` differ, each as ``{"setting", "from", "to"}``."""
    return [{"setting": name, "from": old.get(name), "to": new.get(name)}
            for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]


def open_switch_store(url: str | None) -> SwitchStore:
    """The store ``url`` names: ``redis://...`` (or ``rediss://``, ``unix://``), a file path, or None for the host's."""
    if url and url.startswith(("redis://", "rediss://", "unix://")):
        from agent_saga.gate._redis_store import RedisSwitchStore

        return RedisSwitchStore(url)
    return FileSwitchStore(url)


_PROCESS_DEFAULT: Any = object()


def switch_posture(gate: object = _PROCESS_DEFAULT) -> dict[str, Any]:
    """Which kill switch a saga with ``gate`` obeys, and whether that includes the host's own store.

    For a saga's start record, so that running outside the host's switch is never
    silent. ``gate`` is the saga's gate (None: it has none); without an argument,
    the gate a saga started now would get by default. Returns a JSON-able dict:
    ``enforced`` (is any kill switch consulted), ``stores`` (their locations),
    ``host_default`` (is the host's store, at its real location, among them) and
    ``overrides`` (what moved the saga away from that default, in words).
    """
    if gate is _PROCESS_DEFAULT:
        from agent_saga.context import default_gate

        gate = default_gate()
    if gate is None:
        return _posture([], ["no gate: this saga consults no kill switch"])
    switch = getattr(gate, "switch", None)
    if not isinstance(switch, KillSwitch):
        return _posture([], [f"gate {type(gate).__name__} has no kill switch"])
    # Worked out once per switch (and host location): every saga's start asks.
    moved = relocated()
    known = switch._posture
    if known is None or known[0] != moved:
        stores = [source.location for source in switch.sources]
        if str(default_switch_path()) not in stores:
            known = (moved, _posture(stores, ["KillSwitch(host=False)"], enforced=True))
        else:
            known = (moved, _posture(stores, [moved] if moved else [], enforced=True))
        switch._posture = known
    posture = known[1]
    return {**posture, "stores": list(posture["stores"]), "overrides": list(posture["overrides"])}


def _posture(stores: list[str], overrides: list[str], *, enforced: bool = False) -> dict[str, Any]:
    return {"enforced": enforced, "stores": stores, "host_default": enforced and not overrides,
            "overrides": overrides}
