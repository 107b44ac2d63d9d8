"""PostgreSQL (COMPENSABLE): update, insert and delete one row by its primary key, each undoable.

``update(table, key, values)``, ``insert(table, row)`` and ``delete(table, key)`` name the
row by its whole primary key (compound keys are the point: ``key={"org": 1, "id": 7}``).
Before the step, one autocommit round trip snapshots only the columns the step touches
(every column, for a delete) together with the row version (``xmin``); no transaction is
ever held open across the model's thinking time. The write itself is one statement,
guarded by that version: if anyone wrote the row since the snapshot, nothing happens and
the step raises ``NotApplied``.

Because the snapshot is taken before the step, its undo is known before the call and is
written with the step's intent: a process that dies mid-write leaves an undo the recovery
daemon can run. The undo restores the snapshot only if no concurrent writer touched the
row since the step's own write (its ``xmin``, or, when the outcome is unknown, the touched
columns still holding what the step wrote); otherwise it raises :class:`ConflictError` and
the step is escalated, never overwritten.

Values are JSON (numbers, strings, booleans, null, objects for json columns) and reach
Postgres through ``jsonb_populate_record``, so each column's own type converts them (a
string for a date, a timestamp, a numeric you want exact). Snapshots keep each column's
JSON text as Postgres rendered it, so a restore is exact. ``credential_ref`` names a
connection string (``postgresql://...``), resolved at the moment of use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_saga.connectors._common import ConflictError, PrebuiltUndo, require, run_step, secret
from agent_saga.errors import ConfigurationError, NotApplied
from agent_saga.registry import compensator, reconciler
from agent_saga.semantics import Observation

psycopg = require("psycopg", "postgres", "postgres")
from psycopg import sql  # noqa: E402 - only once the extra is known to be there
from psycopg.types.json import Jsonb  # noqa: E402

__all__ = [
    "DEFAULT_CREDENTIAL", "ConflictError", "delete", "insert", "remove_inserted", "restore_deleted",
    "revert_update", "update",
]

#: The credential name (a connection string) used when a call names none.
DEFAULT_CREDENTIAL = "postgres"

# The row's JSON as text per column (exact, whatever the type), of some columns or all.
_AS_TEXTS = "(SELECT jsonb_object_agg(e.key, e.value::text) FROM jsonb_each(to_jsonb(t)) e {filter})"
# And back: those texts as one jsonb, ready for jsonb_populate_record.
_FROM_TEXTS = "(SELECT jsonb_object_agg(key, value::jsonb) FROM jsonb_each_text({texts}))"


@dataclass(frozen=True, slots=True)
class _Row:
    """One row of one table, named by its primary key."""

    table: str
    key: dict[str, Any]

    def __post_init__(self) -> None:
        parts = self.table.split(".") if isinstance(self.table, str) else []
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise ConfigurationError(f"table must be 'name' or 'schema.name', got {self.table!r}")
        if not isinstance(self.key, Mapping) or not self.key:
            raise ConfigurationError(f"key must name the row's primary key columns and values, got {self.key!r}")

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(*self.table.split("."))

    def where(self) -> sql.Composable:
        """Each key column of ``t`` equal to the key's value, converted by that column's own type."""
        return sql.SQL(" AND ").join(
            sql.SQL("t.{} = (jsonb_populate_record(NULL::{}, %(key)s::jsonb)).{}").format(
                sql.Identifier(col), self.ident, sql.Identifier(col))
            for col in sorted(self.key)
        )

    def params(self, **more: Any) -> dict[str, Any]:
        return {"key": Jsonb(self.key), **more}


def _connect(credential_ref: str) -> Any:
    dsn, _ = secret(credential_ref)
    return psycopg.connect(dsn, autocommit=True)


def _columns(names: Any) -> list[str]:
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigurationError(f"expected a non-empty mapping of column names, got {names!r}")
    return sorted(names)


def _snapshot(row: _Row, columns: list[str] | None, credential_ref: str) -> tuple[str, dict[str, str]] | None:
    """One autocommit round trip: check the key is the primary key, read the row's version and columns.

    ``columns`` None snapshots every column. Returns (xmin, {column: JSON text}), or
    None when there is no such row.
    """
    texts = sql.SQL(_AS_TEXTS).format(filter=sql.SQL("" if columns is None else "WHERE e.key = ANY(%(cols)s)"))
    query = sql.SQL(
        "SELECT (SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a"
        "        ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
        "        WHERE i.indrelid = %(table)s::regclass AND i.indisprimary),"
        "       (SELECT jsonb_build_array(t.xmin::text, {texts}) FROM {table} t WHERE {where})"
    ).format(texts=texts, table=row.ident, where=row.where())
    with _connect(credential_ref) as conn:
        pk, found = conn.execute(query, row.params(table=row.ident.as_string(conn), cols=columns)).fetchone()
    if set(pk or ()) != set(row.key):
        raise ConfigurationError(
            f"key {sorted(row.key)} is not the primary key of {row.table} ({sorted(pk or ())}); name the row "
            "by its whole primary key, so that one step touches one row"
        )
    if found is None:
        return None
    return str(found[0]), dict(found[1] or {})


# -- update ---------------------------------------------------------------------------------


def update(table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
           credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Set ``values`` on the row ``key`` names: a saga step ``postgres.update``, undone by ``postgres.revert_update``."""
    row = _Row(table, dict(key))
    columns = _columns(list(values))
    snapshot = _snapshot(row, columns, credential_ref)
    if snapshot is None:
        raise NotApplied(f"{table}: no row with key {dict(key)}; nothing was updated")
    xmin, before = snapshot
    args = {"table": table, "key": dict(key), "values": dict(values), "before": before, "snapshot_xmin": xmin,
            "credential_ref": credential_ref}
    undo = PrebuiltUndo("postgres.revert_update", {"table": table, "key": dict(key), "before": before, "wrote": dict(values),
                                 "credential_ref": credential_ref}, ("xmin",))
    return run_step("postgres.update", functools.partial(_apply_update, row, dict(values), xmin, credential_ref), args, undo)  # type: ignore[no-any-return]


def _apply_update(row: _Row, values: dict[str, Any], snapshot_xmin: str, credential_ref: str) -> dict[str, Any]:
    sets = sql.SQL(", ").join(sql.SQL("{c} = r.{c}").format(c=sql.Identifier(c)) for c in sorted(values))
    query = sql.SQL(
        "UPDATE {table} t SET {sets} FROM jsonb_populate_record(NULL::{table}, %(values)s::jsonb) r"
        " WHERE {where} AND t.xmin::text = %(xmin)s RETURNING t.xmin::text"
    ).format(table=row.ident, sets=sets, where=row.where())
    with _connect(credential_ref) as conn:
        done = conn.execute(query, row.params(values=Jsonb(values), xmin=snapshot_xmin)).fetchone()
    if done is None:
        raise NotApplied(f"{row.table} {row.key}: the row changed (or went) since its snapshot; nothing was updated")
    return {"table": row.table, "key": row.key, "xmin": done[0]}


def _touched_equal(row: _Row, values_param: str, columns: list[str]) -> sql.Composable:
    """SQL: every listed column of ``t`` equals (as its own type) the JSON value given in a parameter."""
    return sql.SQL(" AND ").join(
        sql.SQL("t.{c} IS NOT DISTINCT FROM (jsonb_populate_record(NULL::{table}, {p}::jsonb)).{c}").format(
            c=sql.Identifier(c), table=row.ident, p=sql.Placeholder(values_param))
        for c in columns
    )


def _texts_equal(row: _Row, texts_param: str, columns: list[str]) -> sql.Composable:
    from_texts = sql.SQL(_FROM_TEXTS).format(texts=sql.SQL("{}::jsonb").format(sql.Placeholder(texts_param)))
    return sql.SQL(" AND ").join(
        sql.SQL("t.{c} IS NOT DISTINCT FROM (jsonb_populate_record(NULL::{table}, {j})).{c}").format(
            c=sql.Identifier(c), table=row.ident, j=from_texts)
        for c in columns
    )


def _read(conn: Any, row: _Row, checks: Mapping[str, sql.Composable], params: dict[str, Any]) -> dict[str, Any] | None:
    """The row's version and the truth of each named check, or None when the row is gone."""
    cols = sql.SQL(", ").join(sql.SQL("({})").format(c) for c in checks.values())
    query = sql.SQL("SELECT t.xmin::text, {cols} FROM {table} t WHERE {where}").format(
        cols=cols, table=row.ident, where=row.where())
    found = conn.execute(query, row.params(**params)).fetchone()
    return None if found is None else {"xmin": found[0], **dict(zip(checks, found[1:], strict=True))}


@compensator("postgres.revert_update")
def revert_update(table: str, key: dict[str, Any], before: dict[str, str], wrote: dict[str, Any],
                  xmin: str | None = None, credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Put the snapshot back, unless someone else wrote the row since the step did (then ConflictError)."""
    row, columns = _Row(table, key), sorted(before)
    params = {"before": Jsonb(before), "wrote": Jsonb(wrote)}
    ours = sql.SQL("t.xmin::text = {}").format(sql.Literal(xmin)) if xmin else _touched_equal(row, "wrote", columns)
    sets = sql.SQL(", ").join(sql.SQL("{c} = r.{c}").format(c=sql.Identifier(c)) for c in columns)
    query = sql.SQL(
        "UPDATE {table} t SET {sets} FROM jsonb_populate_record(NULL::{table}, {from_texts}) r"
        " WHERE {where} AND {ours} RETURNING 1"
    ).format(table=row.ident, sets=sets, from_texts=sql.SQL(_FROM_TEXTS).format(texts=sql.SQL("%(before)s::jsonb")),
             where=row.where(), ours=ours)
    with _connect(credential_ref) as conn:
        if conn.execute(query, row.params(**params)).fetchone() is not None:
            return
        state = _read(conn, row, {"restored": _texts_equal(row, "before", columns)}, params)
    if state is not None and state["restored"]:
        return  # already restored (an earlier attempt whose answer was lost), or never changed
    what = "the row is gone" if state is None else "someone else wrote the row after this saga did"
    raise ConflictError(f"{table} {key}: not restored, {what}; a human must decide which change stands")


@reconciler("postgres.update")
def observe_update(*, table: str, key: dict[str, Any], values: dict[str, Any], before: dict[str, str],
                   snapshot_xmin: str, credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    """Did the update land (the row's version moved and the columns hold what it wrote)? Is it reverted?"""
    row, columns = _Row(table, key), sorted(values)
    params = {"wrote": Jsonb(values), "before": Jsonb(before)}
    with _connect(credential_ref) as conn:
        state = _read(conn, row, {"wrote": _touched_equal(row, "wrote", columns),
                                  "before": _texts_equal(row, "before", columns)}, params)
    if state is None:
        return Observation(None, detail="the row is gone")
    if state["xmin"] == snapshot_xmin:
        return Observation(exists=False, detail="the row is untouched since the snapshot")
    if state["wrote"]:
        return Observation(exists=True, reversed_=False, detail="the touched columns hold what the step wrote",
                           result={"table": table, "key": key, "xmin": state["xmin"]})
    if state["before"]:
        return Observation(exists=True, reversed_=True, detail="the touched columns hold their values from before")
    return Observation(None, detail="the touched columns hold other values: someone else wrote them")


# -- insert ---------------------------------------------------------------------------------


def insert(table: str, row: Mapping[str, Any], *, key: tuple[str, ...] | list[str] | None = None,
           credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Insert ``row`` (it must include its primary key): a step ``postgres.insert``, undone by ``postgres.remove_inserted``.

    ``key`` lists the primary key's columns (checked against the table before the step).
    """
    values = dict(row)
    names = list(key) if key is not None else []
    if not names or any(n not in values for n in names):
        raise ConfigurationError(
            f"insert into {table}: pass key=[...] naming the primary key columns, each given in the row "
            f"(got key={key!r}, row columns {sorted(values)}); the undo finds the row by it"
        )
    target = _Row(table, {n: values[n] for n in names})
    if _snapshot(target, names, credential_ref) is not None:
        raise NotApplied(f"{table}: a row with key {target.key} already exists; nothing was inserted")
    args = {"table": table, "key": target.key, "row": values, "credential_ref": credential_ref}
    undo = PrebuiltUndo("postgres.remove_inserted", {"table": table, "key": target.key, "row": values, "credential_ref": credential_ref},
                        ("xmin",))
    return run_step("postgres.insert", functools.partial(_apply_insert, target, values, credential_ref), args, undo)  # type: ignore[no-any-return]


def _apply_insert(target: _Row, values: dict[str, Any], credential_ref: str) -> dict[str, Any]:
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in sorted(values))
    picked = sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(c)) for c in sorted(values))
    query = sql.SQL(
        "INSERT INTO {table} AS t ({cols}) SELECT {picked} FROM jsonb_populate_record(NULL::{table}, %(row)s::jsonb) r"
        " RETURNING t.xmin::text"
    ).format(table=target.ident, cols=cols, picked=picked)
    with _connect(credential_ref) as conn:
        try:
            done = conn.execute(query, {"row": Jsonb(values)}).fetchone()
        except psycopg.errors.UniqueViolation as err:
            raise NotApplied(f"{target.table}: a row with key {target.key} already exists ({err.diag.message_primary})") from None
    assert done is not None
    return {"table": target.table, "key": target.key, "xmin": done[0]}


@compensator("postgres.remove_inserted")
def remove_inserted(table: str, key: dict[str, Any], row: dict[str, Any], xmin: str | None = None,
                    credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Delete the inserted row, unless someone else wrote it since (then ConflictError)."""
    target, columns = _Row(table, key), sorted(row)
    ours = sql.SQL("t.xmin::text = {}").format(sql.Literal(xmin)) if xmin else _touched_equal(target, "row", columns)
    query = sql.SQL("DELETE FROM {table} t WHERE {where} AND {ours} RETURNING 1").format(
        table=target.ident, where=target.where(), ours=ours)
    with _connect(credential_ref) as conn:
        if conn.execute(query, target.params(row=Jsonb(row))).fetchone() is not None:
            return
        if _read(conn, target, {"present": sql.SQL("true")}, {}) is None:
            return  # gone already: an earlier attempt, or the insert never landed
    raise ConflictError(f"{table} {key}: the inserted row was changed by someone else; not deleted")


@reconciler("postgres.insert")
def observe_insert(*, table: str, key: dict[str, Any], row: dict[str, Any],
                   credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    target = _Row(table, key)
    with _connect(credential_ref) as conn:
        state = _read(conn, target, {"ours": _touched_equal(target, "row", sorted(row))}, {"row": Jsonb(row)})
    if state is None:
        return Observation(exists=False, detail="no row with that key")
    if state["ours"]:
        return Observation(exists=True, reversed_=False, detail="the row holds what the step inserted",
                           result={"table": table, "key": key, "xmin": state["xmin"]})
    return Observation(None, detail="a row with that key holds other values")


# -- delete ---------------------------------------------------------------------------------


def delete(table: str, key: Mapping[str, Any], *, credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Delete the row ``key`` names: a step ``postgres.delete``, undone by ``postgres.restore_deleted``."""
    target = _Row(table, dict(key))
    snapshot = _snapshot(target, None, credential_ref)
    if snapshot is None:
        raise NotApplied(f"{table}: no row with key {dict(key)}; nothing was deleted")
    xmin, before = snapshot
    args = {"table": table, "key": dict(key), "before": before, "snapshot_xmin": xmin, "credential_ref": credential_ref}
    undo = PrebuiltUndo("postgres.restore_deleted", {"table": table, "key": dict(key), "before": before, "credential_ref": credential_ref})
    return run_step("postgres.delete", functools.partial(_apply_delete, target, xmin, credential_ref), args, undo)  # type: ignore[no-any-return]


def _apply_delete(target: _Row, snapshot_xmin: str, credential_ref: str) -> dict[str, Any]:
    query = sql.SQL("DELETE FROM {table} t WHERE {where} AND t.xmin::text = %(xmin)s RETURNING 1").format(
        table=target.ident, where=target.where())
    with _connect(credential_ref) as conn:
        if conn.execute(query, target.params(xmin=snapshot_xmin)).fetchone() is None:
            raise NotApplied(f"{target.table} {target.key}: the row changed (or went) since its snapshot; nothing was deleted")
    return {"table": target.table, "key": target.key, "xmin": None}


@compensator("postgres.restore_deleted")
def restore_deleted(table: str, key: dict[str, Any], before: dict[str, str], xmin: str | None = None,
                    credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Insert the deleted row back as it was, unless another row took its key (then ConflictError)."""
    target, columns = _Row(table, key), sorted(before)
    query = sql.SQL("INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, {from_texts})").format(
        table=target.ident, from_texts=sql.SQL(_FROM_TEXTS).format(texts=sql.SQL("%(before)s::jsonb")))
    with _connect(credential_ref) as conn:
        try:
            conn.execute(query, {"before": Jsonb(before)})
            return
        except psycopg.errors.UniqueViolation:
            state = _read(conn, target, {"same": _texts_equal(target, "before", columns)}, {"before": Jsonb(before)})
    if state is not None and state["same"]:
        return  # restored already
    raise ConflictError(f"{table} {key}: another row took this key after the delete; not restored")


@reconciler("postgres.delete")
def observe_delete(*, table: str, key: dict[str, Any], before: dict[str, str], snapshot_xmin: str,
                   credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    target = _Row(table, key)
    with _connect(credential_ref) as conn:
        state = _read(conn, target, {"same": _texts_equal(target, "before", sorted(before))},
                      {"before": Jsonb(before)})
    if state is None:
        return Observation(exists=True, reversed_=False, detail="the row is gone",
                           result={"table": table, "key": key, "xmin": None})
    if state["xmin"] == snapshot_xmin:
        return Observation(exists=False, detail="the row is untouched since the snapshot")
    if state["same"]:
        return Observation(exists=True, reversed_=True, detail="the row is back as it was")
    return Observation(None, detail="a row with that key holds other values")
