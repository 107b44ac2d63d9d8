"""Snapshot capture: state taken before the next step, put back on rollback.

Two kinds, one step each (so the unwind, the log and the daemon treat a snapshot
like any other step):

* in-process (REVERSIBLE): ``capture()`` runs now, ``restore(captured)`` is the
  step's undo, a closure that runs in LIFO order with the other undos. Nothing is
  written but the step's commit record; a crash loses it with the process.
* durable (COMPENSABLE): the captured state (JSON) passes the same secret and JSON
  checks as a compensation's kwargs, is written to a :class:`SnapshotStore` and made
  durable *before* the step's intent; the intent's undo is the registered handler
  ``agent_saga.snapshot.restore`` with the store's name, the saga, the blob's content
  hash and the name of the registered restore handler. The log holds that
  reference, never the state; a recovery daemon in another process runs it after a
  kill -9 (the store and the restore handler must be registered there too).

A store is found by name through :func:`register_snapshot_store`, never by a path or
URL read from the log: the log is data, and a name it holds can only pick among the
stores this process was configured with.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, runtime_checkable
from typing import Protocol as Interface

from agent_saga.credentials import assert_no_secrets
from agent_saga.engine.invoke import Barrier, Call, Protocol
from agent_saga.engine.served import _recording
from agent_saga.engine.step_options import StepOptions
from agent_saga.engine.undo import undoing
from agent_saga.errors import CompensationError, CompensationRefused, ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.registry import compensator, handler_name, lookup, resolve
from agent_saga.semantics import ActionSemantics, Compensation, json_roundtrips

__all__ = [
    "RESTORE_HANDLER",
    "SnapshotStore",
    "check_digest",
    "check_saga_id",
    "digest_of",
    "encode_state",
    "protocol",
    "register_snapshot_store",
    "restore_name",
    "restore_snapshot",
    "restore_undo",
    "snapshot_store",
    "unregister_snapshot_store",
]

#: The semantics of each kind of snapshot step.
IN_PROCESS = ActionSemantics.REVERSIBLE
DURABLE = ActionSemantics.COMPENSABLE

#: The registered handler a durable snapshot's undo names in the log.
RESTORE_HANDLER = "agent_saga.snapshot.restore"

# What a saga id / digest read from the log or a store may look like before it touches a
# file name or a key: no separators, no "..", bounded. Saga ids the engine makes fit easily.
_SAGA_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
# The key that marks a blob holding the state with its restore handler (and its version).
_BLOB = "agent_saga.snapshot"


@runtime_checkable
class SnapshotStore(Interface):
    """Where durable snapshots live: content-addressed blobs grouped by saga.

    ``put`` returns only once the blob is durable; ``get`` checks the blob against its
    hash (a KeyError when it is missing, a CompensationError when it does not match).
    ``sagas`` and ``delete_saga`` are for the GC sweep (``agent_saga.snapshots._gc``).
    """

    name: str

    def put(self, saga_id: str, data: bytes) -> str: ...

    def get(self, saga_id: str, digest: str) -> bytes: ...

    def sagas(self) -> list[str]: ...

    def delete_saga(self, saga_id: str) -> int: ...


def check_saga_id(saga_id: object) -> str:
    """``saga_id`` if it is safe as a file name and a key; a one-line ValueError otherwise."""
    if not isinstance(saga_id, str) or not _SAGA_ID.fullmatch(saga_id) or ".." in saga_id:
        raise ValueError(
            f"snapshot saga id {saga_id!r} is not a saga id (letters, digits, '_', '.', ':', '-'; at most 200)"
        )
    return saga_id


def check_digest(digest: object) -> str:
    """``digest`` if it is a lowercase hex SHA-256; a one-line ValueError otherwise."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ValueError(f"snapshot digest {digest!r} is not a lowercase hex SHA-256")
    return digest


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_state(state: Any, name: str, restore: str) -> bytes:
    """The blob of a durable snapshot: the captured state and the restore handler it is for.

    The state passes the checks a compensation's kwargs pass first. The handler is written
    beside it, in the blob the digest covers, so an undo that hands this state to another
    handler is refused (:func:`restore_snapshot`).
    """
    where = f"captured state of snapshot {name!r}"
    assert_no_secrets(state, where=where)
    if not json_roundtrips(state):
        raise CompensationError(
            f"{where} does not survive a JSON round trip ({type(state).__name__}); a recovery daemon "
            "could not restore it. Return plain str/int/float/bool/None/list/dict values from capture"
        )
    blob = {_BLOB: 1, "restore": restore, "state": state}
    return json.dumps(blob, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _decode_state(data: bytes) -> tuple[Any, str | None]:
    """(the captured state, the restore handler it was taken for) of a blob.

    A blob written before the handler was stored with the state (plain JSON of the state) has
    no handler: None, and the one its undo names is taken on that record's word.
    """
    value = json.loads(data)
    if isinstance(value, dict) and value.keys() == {_BLOB, "restore", "state"} and value[_BLOB] == 1:
        return value["state"], str(value["restore"])
    return value, None


# -- the stores this process knows, by name -------------------------------------------

_lock = threading.Lock()
_stores: dict[str, SnapshotStore] = {}


def register_snapshot_store(store: SnapshotStore) -> SnapshotStore:
    """Make ``store`` findable by its name (a daemon restoring its snapshots needs it too).

    Registering the same name again for a different store is refused, like a compensator:
    the daemon would otherwise restore from whichever was registered last.
    """
    if not isinstance(store, SnapshotStore):
        raise ConfigurationError(f"{store!r} is not a SnapshotStore (name, put, get, sagas, delete_saga)")
    name = store.name
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"a snapshot store needs a non-empty name, got {name!r}")
    with _lock:
        existing = _stores.get(name)
        if existing is not None and existing is not store and existing != store:
            raise ConfigurationError(
                f"a different snapshot store is already registered as {name!r} ({existing!r}); "
                "give this one another name=, or unregister_snapshot_store() the old one"
            )
        _stores[name] = store
    return store


def unregister_snapshot_store(name: str) -> None:
    """Forget a store (for tests and reconfiguration)."""
    with _lock:
        _stores.pop(name, None)


def snapshot_store(name: str) -> SnapshotStore:
    """The store registered as ``name``; a KeyError naming the fix otherwise."""
    return lookup(_stores, name, "snapshot store",
                  "call register_snapshot_store(...) in the module the recovery daemon imports")


@compensator(RESTORE_HANDLER)
def restore_snapshot(store: str, saga: str, digest: str, restore: str) -> Any:
    """Read a durable snapshot back and hand it to its registered restore handler.

    Every argument comes from the log, so each is checked before it is used: the store
    and the restore handler are looked up among those registered here, the saga id and
    digest must have their shapes, and the blob must hash to the digest. The snapshot
    must be the compensated saga's own (the saga its runner says it undoes, never the
    one the record names) and taken for ``restore``: else ``CompensationRefused``, which
    the rollback and the recovery daemon escalate without retrying.
    """
    fn = resolve(restore)
    saga, digest = check_saga_id(saga), check_digest(digest)
    undone = undoing()
    if undone != saga:
        during = "outside any undo" if undone is None else f"while saga {undone!r} is compensated"
        raise CompensationRefused(
            f"snapshot of saga {saga!r} is not restored {during}: a restore puts back only a snapshot "
            "taken by the saga it undoes"
        )
    state, taken_for = _decode_state(snapshot_store(store).get(saga, digest))
    if taken_for is not None and taken_for != restore:
        raise CompensationRefused(
            f"snapshot {digest[:12]} of saga {saga!r} was taken for restore handler {taken_for!r}, "
            f"not {restore!r}: not restored"
        )
    return fn(state)


def restore_name(restore: Callable[..., Any] | str, name: str) -> str:
    """The registered name of a durable snapshot's restore handler; a one-line error otherwise."""
    found = restore if isinstance(restore, str) else handler_name(restore)
    if not isinstance(found, str):
        raise ConfigurationError(
            f"snapshot {name!r} with a store needs restore= registered with @compensator (or its name): "
            "a recovery daemon in another process must find it by name"
        )
    resolve(found)  # a clear KeyError now, not at rollback
    return found


def restore_undo(store: SnapshotStore, saga_id: str, digest: str, restore: str, name: str) -> Compensation:
    """The undo a durable snapshot's intent records: a reference to the blob, never the state."""
    return Compensation(
        handler=RESTORE_HANDLER, fn=restore_snapshot,
        kwargs={"store": store.name, "saga": saga_id, "digest": digest, "restore": restore},
        description=f"restore snapshot {name!r}",
    )


class _Saga(Interface):
    """What the protocol uses of a Saga (structurally: engine/saga.py imports this module)."""

    saga_id: str
    wal: WAL

    def _step(
        self, tool: str, forward: Callable[..., Any], args: Mapping[str, Any] | None, opts: StepOptions,
        via_fallback: bool = False,
    ) -> Protocol[Any]: ...

    def _check_open(self) -> None: ...


def protocol(
    saga: _Saga, name: str, capture: Callable[[], Any], restore: Callable[..., Any] | str, store: SnapshotStore | None,
) -> Protocol[Any]:
    """``Saga.snapshot``'s protocol: one step, in-process or durable (see the module)."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"snapshot needs a non-empty name, got {name!r}")
    if not callable(capture):
        raise ConfigurationError(f"snapshot {name!r}: capture= must be a callable returning the state")
    if store is None:
        if not callable(restore):
            raise ConfigurationError(f"snapshot {name!r}: restore= must be a callable taking the captured state")
        undo = restore

        def compensate(captured: Any) -> Compensation:
            return Compensation(fn=lambda: undo(captured), description=f"restore snapshot {name!r}")

        # The state stays out of the log (it may be large, or private): the log says a snapshot ran.
        opts = StepOptions.build(None, IN_PROCESS, {"compensate": compensate, "inline": True, "record_result": "none"})
        return (yield from saga._step("snapshot", capture, {"name": name}, opts))
    if not isinstance(store, SnapshotStore):
        raise ConfigurationError(f"snapshot {name!r}: store= {store!r} is not a SnapshotStore")
    handler = restore_name(restore, name)
    replay = _recording.get() is not None
    if not replay:
        saga._check_open()  # nothing is written to a store for a saga that cannot take a step
        register_snapshot_store(store)
        # The saga's start durable before its blob: every stored snapshot belongs to a saga some
        # log knows, so a crash right after the put leaves a saga the daemon settles and GC clears.
        yield Barrier(saga.wal, None)
    # capture on the caller's thread (it may be async); the put off the event loop (it fsyncs).
    data = encode_state((yield Call(capture, {}, None, True)), name, handler)
    if replay:
        digest = digest_of(data)  # a counterfactual replay writes to no store: the recording answers
    else:
        digest = yield Call(store.put, {"saga_id": check_saga_id(saga.saga_id), "data": data}, None, False)
    undo_ = restore_undo(store, saga.saga_id, digest, handler, name)
    opts = StepOptions.build(None, DURABLE, {"compensate": undo_, "inline": True, "record_result": "none"})
    yield from saga._step("snapshot", lambda: digest, {"name": name, "digest": digest}, opts)
    return digest


