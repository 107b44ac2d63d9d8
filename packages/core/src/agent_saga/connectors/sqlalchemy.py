"""SQLAlchemy (COMPENSABLE): insert, update and delete one row by its primary key, on any database SQLAlchemy 2.x speaks.

``update(table, key, values)``, ``insert(table, row)`` and ``delete(table, key)`` name the
row by its whole primary key (compound keys included: ``key={"org": 1, "id": 7}``), checked
against the table's reflected primary key before the step. Every trip to the database is
one short transaction, committed at once (one that writes first locks the row: ``SELECT ...
FOR UPDATE``, or ``BEGIN IMMEDIATE`` on SQLite): nothing is held across the model's
thinking time.

SQL has no row version every database shares (Postgres's ``xmin`` is Postgres's), so the
connector makes one: the row's *version* is a hash of every column as the database returns
it. The step snapshots the touched columns (every column, for a delete) and that version;
its write happens only if the row still has that version, else the step is ``NotApplied``.
The write reads the row back in the same transaction and returns its new version.

The undo, built from the snapshot, is known before the call and written with the step's
intent, so the recovery daemon can run it after a crash. It restores the snapshot only if
the row still has the version the step left (or, when the outcome is unknown, the touched
columns still hold what the step wrote); otherwise it raises :class:`ConflictError`, naming
the row, and the step is escalated, never overwritten. A concurrent write that leaves every
column as it found it is invisible to a hash, and harmless to the restore.

Values reach the log as JSON: strings, numbers, booleans and null as they are; a Decimal,
datetime, date, time, timedelta, UUID, bytes, list or dict as a one-key object
(``{"$decimal": "12.50"}``) so the restore gives the database back exactly the value it gave.
A string given for a date, time, datetime, Decimal or UUID column is parsed as one.
``credential_ref`` names a credential that resolves to a SQLAlchemy URL (``"sqlite:///app.db"``,
``"postgresql+psycopg://..."``) or an ``Engine``, at the moment of use.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any

from agent_saga.connectors._common import ConflictError, PrebuiltUndo, require, run_step, secret
from agent_saga.credentials import CredentialError
from agent_saga.errors import ConfigurationError, NotApplied
from agent_saga.registry import compensator, reconciler
from agent_saga.semantics import Observation

require("sqlalchemy", "sqlalchemy", "sqlalchemy")
import sqlalchemy as sa  # noqa: E402 - only once the extra is known to be there
from sqlalchemy.exc import IntegrityError, NoSuchTableError  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

__all__ = [
    "DEFAULT_CREDENTIAL", "ConflictError", "decode", "delete", "encode", "insert", "remove_inserted",
    "restore_deleted", "revert_update", "update",
]

#: The credential name (a SQLAlchemy URL, or an Engine) used when a call names none.
DEFAULT_CREDENTIAL = "database"


# -- values as JSON, exactly ---------------------------------------------------------------

_TAGS: dict[str, Callable[[Any], Any]] = {
    "$decimal": Decimal,
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$timedelta": lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "$uuid": uuid.UUID,
    "$bytes": base64.b64decode,
    "$float": float,
    "$list": lambda v: [decode(x) for x in v],
    "$dict": lambda v: {k: decode(x) for k, x in v.items()},
}


def encode(value: Any, *, where: str = "value") -> Any:
    """``value`` as JSON that :func:`decode` turns back into an equal value of the same type."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return {"$list": [encode(x, where=where) for x in value]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: encode(x, where=where) for k, x in value.items()}}
    raise ConfigurationError(
        f"{where}: a value of type {type(value).__name__} cannot be recorded in the log; the connector records "
        "strings, numbers, booleans, null, Decimal, date/time, UUID, bytes, lists and dicts"
    )


def decode(value: Any) -> Any:
    """The value :func:`encode` recorded."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag in _TAGS:
            return _TAGS[tag](inner)
    return value


def _version(row: Mapping[str, Any]) -> str:
    """The row's version: a hash of every column as the database returned it."""
    text = json.dumps({c: _hashable(v) for c, v in row.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _hashable(value: Any) -> Any:
    # A column the step does not record (an address, a range) still counts towards the version.
    try:
        return encode(value)
    except ConfigurationError:
        return {"$repr": f"{type(value).__qualname__}:{value!r}"}


# -- the table, the row, the connection ----------------------------------------------------


def _split(table: Any) -> tuple[str | None, str]:
    parts = table.split(".") if isinstance(table, str) else []
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ConfigurationError(f"table must be 'name' or 'schema.name', got {table!r}")
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _plain(key: Mapping[str, Any]) -> dict[str, Any]:
    return {k: decode(v) for k, v in key.items()}


def _engine(credential_ref: str) -> tuple[Any, bool]:
    """The Engine the credential names, and whether it is ours to dispose of."""
    value, _ = secret(credential_ref)
    if isinstance(value, sa.Engine):
        return value, False
    if isinstance(value, (str, sa.URL)):
        # No pool: a connection lives exactly as long as its one short transaction.
        return sa.create_engine(value, poolclass=NullPool), True
    raise CredentialError(
        f"credential {credential_ref!r} resolved to a {type(value).__name__}; the sqlalchemy connector needs a "
        "SQLAlchemy URL string or an Engine"
    )


@contextmanager
def _transaction(credential_ref: str, table: str, *, lock: bool = True) -> Iterator[tuple[Any, Any]]:
    """One short transaction on the table (reflected), committed on the way out: (connection, Table)."""
    schema, name = _split(table)
    engine, owned = _engine(credential_ref)
    try:
        with engine.begin() as conn:
            raw = conn.connection.dbapi_connection
            if lock and conn.dialect.name == "sqlite" and not getattr(raw, "in_transaction", False):
                # SQLite has no row locks; take the database's write lock before the first read. (An
                # engine that began its own transaction is left to it: a write after a stale read
                # there fails with "database is locked", it never overwrites.)
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                found = _reflect(conn, schema, name)
            except NoSuchTableError:
                raise ConfigurationError(
                    f"no table {table!r} in the database credential {credential_ref!r} names") from None
            yield conn, found
    finally:
        if owned:
            engine.dispose()


def _reflect(conn: Any, schema: str | None, name: str) -> Any:
    """The table's columns, types and primary key: all a step needs (a full reflection costs twice the queries)."""
    inspector = sa.inspect(conn)
    found = inspector.get_columns(name, schema=schema)  # first: it is what raises NoSuchTableError everywhere
    pk = set(inspector.get_pk_constraint(name, schema=schema)["constrained_columns"] or ())
    columns = [
        sa.Column(c["name"], c["type"], *([sa.Computed(c["computed"]["sqltext"])] if c.get("computed") else []),
                  primary_key=c["name"] in pk)
        for c in found
    ]
    return sa.Table(name, sa.MetaData(), *columns, schema=schema)


def _columns(tbl: Any, names: Any, what: str) -> list[str]:
    if not isinstance(names, Mapping) or not names:
        raise ConfigurationError(f"{what} must be a non-empty mapping of column names to values, got {names!r}")
    unknown = sorted(str(n) for n in names if n not in tbl.c)
    if unknown:
        raise ConfigurationError(f"{tbl.fullname} has no column {', '.join(unknown)} (its columns: {', '.join(tbl.c.keys())})")
    return sorted(names)


def _check_key(tbl: Any, key: Any) -> None:
    pk = sorted(str(c.name) for c in tbl.primary_key.columns)
    if not pk:
        raise ConfigurationError(f"{tbl.fullname} has no primary key; the sqlalchemy connector names a row by it")
    if not isinstance(key, Mapping) or sorted(key) != pk:
        got = sorted(key) if isinstance(key, Mapping) else key
        raise ConfigurationError(
            f"key {got} is not the primary key of {tbl.fullname} ({pk}); name the row by its whole primary key, "
            "so that one step touches one row"
        )


def _coerce(column: Any, value: Any) -> Any:
    """A value the database driver takes for this column: a string parsed when the column's type wants another."""
    try:
        wanted = column.type.python_type
    except NotImplementedError:
        return value
    parse: Callable[[Any], Any] | None = {
        dt.datetime: dt.datetime.fromisoformat, dt.date: dt.date.fromisoformat, dt.time: dt.time.fromisoformat,
        Decimal: Decimal, uuid.UUID: uuid.UUID,
    }.get(wanted)
    if parse is None or isinstance(value, wanted) or value is None:
        return value
    if wanted is dt.date and isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) or (wanted is Decimal and isinstance(value, (int, float)) and not isinstance(value, bool)):
        try:
            return parse(str(value))
        except (ValueError, InvalidOperation) as err:
            raise ConfigurationError(
                f"{column.table.fullname}.{column.name}: {value!r} is not a {wanted.__name__} ({err}); give it in "
                "ISO form (dates, times) or as a decimal string") from None
    return value


def _where(tbl: Any, key: Mapping[str, Any]) -> Any:
    return sa.and_(*(tbl.c[k] == _coerce(tbl.c[k], decode(v)) for k, v in sorted(key.items())))


def _read(conn: Any, tbl: Any, key: Mapping[str, Any], *, lock: bool = True) -> dict[str, Any] | None:
    """The row ``key`` names (with ``lock``, locked until the transaction ends where the database can), or None."""
    query = sa.select(tbl).where(_where(tbl, key))
    found = conn.execute(query.with_for_update() if lock else query).mappings().first()
    return None if found is None else dict(found)


def _holds(row: Mapping[str, Any], encoded: Mapping[str, Any]) -> bool:
    """Every named column holds the recorded value (as recorded, or equal once decoded)."""
    return all(encode(row[c], where=c) == v or row[c] == decode(v) for c, v in encoded.items())


def _written(tbl: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    return {c: _coerce(tbl.c[c], v) for c, v in values.items()}


def _conflict(table: str, key: Mapping[str, Any], what: str) -> ConflictError:
    return ConflictError(f"{table} {_plain(key)}: {what}; a human must decide which change stands")


# -- update ---------------------------------------------------------------------------------


def update(table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
           credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Set ``values`` on the row ``key`` names: a saga step ``sqlalchemy.update``, undone by ``sqlalchemy.revert_update``."""
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        _check_key(tbl, key)
        columns = _columns(tbl, values, "values")
        if set(columns) & set(key):
            raise ConfigurationError(
                f"update of {table}: values change the primary key ({sorted(set(columns) & set(key))}); the undo "
                "finds the row by it, so delete the row and insert it under the new key instead")
        wrote = _written(tbl, values)
        found = _read(conn, tbl, key, lock=False)
    if found is None:
        raise NotApplied(f"{table}: no row with key {dict(key)}; nothing was updated")
    rec_key = {k: encode(v, where=k) for k, v in key.items()}
    before = {c: encode(found[c], where=c) for c in columns}
    rec_wrote = {c: encode(wrote[c], where=c) for c in columns}
    version = _version(found)
    args = {"table": table, "key": rec_key, "values": rec_wrote, "before": before, "snapshot_version": version,
            "credential_ref": credential_ref}
    undo = PrebuiltUndo("sqlalchemy.revert_update", {"table": table, "key": rec_key, "before": before,
                                                     "wrote": rec_wrote, "credential_ref": credential_ref}, ("version",))
    forward = functools.partial(_apply_update, table, rec_key, wrote, version, credential_ref)
    return run_step("sqlalchemy.update", forward, args, undo)  # type: ignore[no-any-return]


def _apply_update(table: str, key: dict[str, Any], values: dict[str, Any], snapshot_version: str,
                  credential_ref: str) -> dict[str, Any]:
    with _transaction(credential_ref, table) as (conn, tbl):
        found = _read(conn, tbl, key)
        if found is None or _version(found) != snapshot_version:
            raise NotApplied(f"{table} {_plain(key)}: the row changed (or went) since its snapshot; nothing was updated")
        conn.execute(sa.update(tbl).where(_where(tbl, key)).values(values))
        after = _read(conn, tbl, key)
    assert after is not None  # the row is locked by this very transaction
    return {"table": table, "key": key, "version": _version(after)}


@compensator("sqlalchemy.revert_update")
def revert_update(table: str, key: dict[str, Any], before: dict[str, Any], wrote: dict[str, Any],
                  version: str | None = None, credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Put the snapshot back, unless someone else wrote the row since the step did (then ConflictError)."""
    with _transaction(credential_ref, table) as (conn, tbl):
        _check_key(tbl, key)
        _columns(tbl, before, "before")
        found = _read(conn, tbl, key)
        if found is None:
            raise _conflict(table, key, "not restored, the row is gone")
        if (_version(found) == version) if version else _holds(found, wrote):
            conn.execute(sa.update(tbl).where(_where(tbl, key)).values({c: decode(v) for c, v in before.items()}))
            return
        if _holds(found, before):
            return  # already restored (an earlier attempt whose answer was lost), or never changed
    raise _conflict(table, key, "not restored, someone else wrote the row after this saga did")


@reconciler("sqlalchemy.update")
def observe_update(*, table: str, key: dict[str, Any], values: dict[str, Any], before: dict[str, Any],
                   snapshot_version: str, credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    """Did the update land (the row changed and the columns hold what it wrote)? Is it reverted?"""
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        found = _read(conn, tbl, key, lock=False)
    if found is None:
        return Observation(None, detail="the row is gone")
    if _version(found) == snapshot_version:
        # A hash cannot tell "never written" from "written, then put back exactly": either way, not there.
        return Observation(exists=False, detail="the row is as its snapshot: never updated, or exactly restored")
    if _holds(found, values):
        return Observation(exists=True, reversed_=False, detail="the touched columns hold what the step wrote",
                           result={"table": table, "key": key, "version": _version(found)})
    if _holds(found, before):
        return Observation(exists=True, reversed_=True, detail="the touched columns hold their values from before")
    return Observation(None, detail="the touched columns hold other values: someone else wrote them")


# -- insert ---------------------------------------------------------------------------------


def insert(table: str, row: Mapping[str, Any], *, credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Insert ``row`` (its whole primary key included): a step ``sqlalchemy.insert``, undone by ``sqlalchemy.remove_inserted``."""
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        columns = _columns(tbl, row, "row")
        pk = sorted(str(c.name) for c in tbl.primary_key.columns)
        if not pk or any(k not in row for k in pk):
            raise ConfigurationError(
                f"insert into {table}: the row must give every primary key column ({pk}; got {columns}); the undo "
                "finds the row by it")
        key = {k: row[k] for k in pk}
        wrote = _written(tbl, row)
        exists = _read(conn, tbl, key, lock=False) is not None
    if exists:
        raise NotApplied(f"{table}: a row with key {key} already exists; nothing was inserted")
    rec_key = {k: encode(v, where=k) for k, v in key.items()}
    rec_row = {c: encode(wrote[c], where=c) for c in columns}
    args = {"table": table, "key": rec_key, "row": rec_row, "credential_ref": credential_ref}
    undo = PrebuiltUndo("sqlalchemy.remove_inserted", {"table": table, "key": rec_key, "row": rec_row,
                                                       "credential_ref": credential_ref}, ("version",))
    forward = functools.partial(_apply_insert, table, rec_key, wrote, credential_ref)
    return run_step("sqlalchemy.insert", forward, args, undo)  # type: ignore[no-any-return]


def _apply_insert(table: str, key: dict[str, Any], values: dict[str, Any], credential_ref: str) -> dict[str, Any]:
    try:
        with _transaction(credential_ref, table) as (conn, tbl):
            conn.execute(sa.insert(tbl).values(values))
            after = _read(conn, tbl, key)
    except IntegrityError as err:
        raise NotApplied(f"{table} {_plain(key)}: the database refused the row ({_first_line(err)}); nothing was "
                         "inserted") from None
    assert after is not None
    return {"table": table, "key": key, "version": _version(after)}


def _first_line(err: IntegrityError) -> str:
    return str(err.orig).strip().splitlines()[0] if str(err.orig).strip() else type(err.orig).__name__


@compensator("sqlalchemy.remove_inserted")
def remove_inserted(table: str, key: dict[str, Any], row: dict[str, Any], version: str | None = None,
                    credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Delete the inserted row, unless someone else wrote it since (then ConflictError)."""
    with _transaction(credential_ref, table) as (conn, tbl):
        _check_key(tbl, key)
        _columns(tbl, row, "row")
        found = _read(conn, tbl, key)
        if found is None:
            return  # gone already: an earlier attempt, or the insert never landed
        if (_version(found) == version) if version else _holds(found, row):
            conn.execute(sa.delete(tbl).where(_where(tbl, key)))
            return
    raise _conflict(table, key, "the inserted row was changed by someone else since; not deleted")


@reconciler("sqlalchemy.insert")
def observe_insert(*, table: str, key: dict[str, Any], row: dict[str, Any],
                   credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        found = _read(conn, tbl, key, lock=False)
    if found is None:
        return Observation(exists=False, detail="no row with that key")
    if _holds(found, row):
        return Observation(exists=True, reversed_=False, detail="the row holds what the step inserted",
                           result={"table": table, "key": key, "version": _version(found)})
    return Observation(None, detail="a row with that key holds other values")


# -- delete ---------------------------------------------------------------------------------


def delete(table: str, key: Mapping[str, Any], *, credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Delete the row ``key`` names: a step ``sqlalchemy.delete``, undone by ``sqlalchemy.restore_deleted``."""
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        _check_key(tbl, key)
        found = _read(conn, tbl, key, lock=False)
        # A computed column is the database's to fill: the restore leaves it out.
        stored = [str(c.name) for c in tbl.columns if c.computed is None]  # str: a quoted_name is not JSON
    if found is None:
        raise NotApplied(f"{table}: no row with key {dict(key)}; nothing was deleted")
    rec_key = {k: encode(v, where=k) for k, v in key.items()}
    before = {c: encode(found[c], where=c) for c in stored}
    version = _version(found)
    args = {"table": table, "key": rec_key, "before": before, "snapshot_version": version,
            "credential_ref": credential_ref}
    undo = PrebuiltUndo("sqlalchemy.restore_deleted", {"table": table, "key": rec_key, "before": before,
                                                       "credential_ref": credential_ref})
    forward = functools.partial(_apply_delete, table, rec_key, version, credential_ref)
    return run_step("sqlalchemy.delete", forward, args, undo)  # type: ignore[no-any-return]


def _apply_delete(table: str, key: dict[str, Any], snapshot_version: str, credential_ref: str) -> dict[str, Any]:
    with _transaction(credential_ref, table) as (conn, tbl):
        found = _read(conn, tbl, key)
        if found is None or _version(found) != snapshot_version:
            raise NotApplied(f"{table} {_plain(key)}: the row changed (or went) since its snapshot; nothing was deleted")
        conn.execute(sa.delete(tbl).where(_where(tbl, key)))
    return {"table": table, "key": key, "version": None}


@compensator("sqlalchemy.restore_deleted")
def restore_deleted(table: str, key: dict[str, Any], before: dict[str, Any], version: str | None = None,
                    credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Insert the deleted row back as it was, unless another row took its key (then ConflictError)."""
    try:
        with _transaction(credential_ref, table) as (conn, tbl):
            _check_key(tbl, key)
            _columns(tbl, before, "before")
            found = _read(conn, tbl, key)
            if found is None:
                conn.execute(sa.insert(tbl).values({c: decode(v) for c, v in before.items()}))
                return
    except IntegrityError as err:
        # Someone inserted this key between the read and the write (no row to lock), or the
        # database refuses the row for another reason (a foreign key gone meanwhile).
        with _transaction(credential_ref, table, lock=False) as (conn, tbl):
            found = _read(conn, tbl, key, lock=False)
        if found is None:
            raise _conflict(table, key, f"the database refused the row back ({_first_line(err)})") from None
    if _holds(found, before):
        return  # restored already
    raise _conflict(table, key, "another row took this key after the delete; not restored")


@reconciler("sqlalchemy.delete")
def observe_delete(*, table: str, key: dict[str, Any], before: dict[str, Any], snapshot_version: str,
                   credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    with _transaction(credential_ref, table, lock=False) as (conn, tbl):
        found = _read(conn, tbl, key, lock=False)
    if found is None:
        return Observation(exists=True, reversed_=False, detail="the row is gone",
                           result={"table": table, "key": key, "version": None})
    if _version(found) == snapshot_version:
        return Observation(exists=False, detail="the row is untouched since the snapshot")
    if _holds(found, before):
        return Observation(exists=True, reversed_=True, detail="the row is back as it was")
    return Observation(None, detail="a row with that key holds other values")
