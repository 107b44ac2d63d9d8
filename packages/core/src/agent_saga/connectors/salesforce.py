"""Salesforce (COMPENSABLE): a record update, reverted field by field, guarded by LastModifiedDate.

``update(sobject, record_id, fields)`` is a saga step ``salesforce.update``. Before it, one
read snapshots only the fields it patches (and the record's ``LastModifiedDate``) and one
describe checks they are writable; the PATCH is sent with ``If-Unmodified-Since`` that date,
so a record changed since the snapshot is left alone (``NotApplied``). Its undo,
``salesforce.revert``, is known before the call and rides the step's intent.

The revert puts back only the patched fields that are still writable, and only if nobody
changed the record since the step: its ``LastModifiedDate`` is still the one the step left
and the patched fields still hold what the step wrote. Otherwise it raises
:class:`ConflictError` (escalated), and its own PATCH carries ``If-Unmodified-Since`` too.

A workflow rule, flow or trigger can rewrite a field right after a write and nothing in
the response says so; the reconcilers read the record, comparing only the fields the saga
touched. ``credential_ref`` names a credential that resolves to the keyword arguments of
``simple_salesforce.Salesforce`` (``{"instance_url": ..., "session_id": ...}``, or a
username, password and security token).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime
from email.utils import format_datetime
from typing import Any

from agent_saga.connectors._common import ConflictError, PrebuiltUndo, require, run_step, secret
from agent_saga.errors import CompensationRefused, ConfigurationError, NotApplied
from agent_saga.registry import compensator, reconciler
from agent_saga.semantics import Observation

simple_salesforce = require("simple_salesforce", "salesforce", "salesforce")

__all__ = ["API_VERSION", "DEFAULT_CREDENTIAL", "ConflictError", "observe_revert", "observe_update", "revert", "update"]

#: The credential name used when a call names none.
DEFAULT_CREDENTIAL = "salesforce"
API_VERSION = "59.0"
_STAMP = "LastModifiedDate"
# An sObject's API name and a record id are data; each becomes a segment of a REST path, so
# nothing else (a "/", a "..", a query) may ride in them from a recorded undo.
_SOBJECT = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,79}\Z")
_RECORD_ID = re.compile(r"[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?\Z")


def _record_id(record_id: object) -> str:
    if not isinstance(record_id, str) or not _RECORD_ID.match(record_id):
        raise CompensationRefused(
            f"salesforce: record id {repr(record_id)[:80]} is not a Salesforce id (15 or 18 letters and digits); "
            "nothing was sent"
        )
    return record_id


def _sobject(credential_ref: str, sobject: str) -> Any:
    if not isinstance(sobject, str) or not _SOBJECT.match(sobject):
        raise CompensationRefused(
            f"salesforce: {repr(sobject)[:80]} is not an sObject API name (a letter, then letters, digits, '_'); "
            "nothing was sent"
        )
    login, _ = secret(credential_ref)
    if not isinstance(login, Mapping):
        raise ConfigurationError(
            f"credential {credential_ref!r} must resolve to simple_salesforce.Salesforce keyword arguments "
            "(a mapping such as {'instance_url': ..., 'session_id': ...})"
        )
    client = simple_salesforce.Salesforce(version=API_VERSION, **login)
    if sobject in dir(client):  # the client's own attribute (session, query...), not an sObject
        raise CompensationRefused(f"salesforce: {sobject!r} names the client's own attribute, not an sObject")
    return getattr(client, sobject)


def _writable(api: Any) -> set[str]:
    return {f["name"] for f in api.describe()["fields"] if f.get("updateable")}


def _read(api: Any, record_id: str, fields: list[str]) -> dict[str, Any]:
    found = api.get(record_id, params={"fields": ",".join([*fields, _STAMP])})
    return {k: found.get(k) for k in [*fields, _STAMP]}


def _http_date(stamp: str) -> str:
    """A ``LastModifiedDate`` (``2024-01-02T03:04:05.000+0000``) as an HTTP date."""
    return format_datetime(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z"), usegmt=True)


def _patch(api: Any, record_id: str, data: dict[str, Any], unmodified_since: str) -> bool:
    """PATCH unless the record changed after ``unmodified_since``; False when it had (412)."""
    try:
        api.update(record_id, data, headers={"If-Unmodified-Since": _http_date(unmodified_since)})
    except simple_salesforce.exceptions.SalesforceError as err:
        if err.status == 412:
            return False
        raise
    return True


def update(sobject: str, record_id: str, fields: Mapping[str, Any], *,
           credential_ref: str = DEFAULT_CREDENTIAL) -> dict[str, Any]:
    """Patch ``fields`` of one record: a saga step ``salesforce.update``, undone by ``salesforce.revert``."""
    names = sorted(fields)
    if not names:
        raise ConfigurationError("salesforce update: give at least one field to patch")
    _record_id(record_id)
    api = _sobject(credential_ref, sobject)
    read_only = sorted(set(names) - _writable(api))
    if read_only:
        raise ConfigurationError(f"{sobject} fields {read_only} are not writable; nothing was patched")
    snapshot = _read(api, record_id, names)
    stamp = snapshot.pop(_STAMP)
    args = {"sobject": sobject, "record_id": record_id, "fields": dict(fields), "before": snapshot,
            "snapshot_modified": stamp, "credential_ref": credential_ref}
    undo = PrebuiltUndo("salesforce.revert", {
        "sobject": sobject, "record_id": record_id, "before": snapshot, "wrote": dict(fields),
        "last_modified": None, "credential_ref": credential_ref,
    }, ("wrote", "last_modified"))
    forward = functools.partial(_apply, sobject, record_id, dict(fields), stamp, credential_ref)
    return run_step("salesforce.update", forward, args, undo)  # type: ignore[no-any-return]


def _apply(sobject: str, record_id: str, fields: dict[str, Any], stamp: str, credential_ref: str) -> dict[str, Any]:
    api = _sobject(credential_ref, sobject)
    if not _patch(api, record_id, fields, stamp):
        raise NotApplied(f"{sobject} {record_id} changed since its snapshot; nothing was patched")
    after = _read(api, record_id, sorted(fields))
    return {"sobject": sobject, "id": record_id, "last_modified": after.pop(_STAMP), "wrote": after}


@compensator("salesforce.revert")
def revert(sobject: str, record_id: str, before: dict[str, Any], wrote: dict[str, Any],
           last_modified: str | None = None, credential_ref: str = DEFAULT_CREDENTIAL) -> None:
    """Put back the patched, still-writable fields, unless someone changed the record since the step."""
    _record_id(record_id)
    api = _sobject(credential_ref, sobject)
    names = sorted(set(before) & _writable(api))
    now = _read(api, record_id, names)
    if all(now[f] == before[f] for f in names):
        return  # reverted already (an earlier attempt), or the patch never landed
    changed = [f for f in names if now[f] != wrote.get(f)]
    if changed or (last_modified is not None and now[_STAMP] != last_modified):
        raise ConflictError(
            f"{sobject} {record_id} was changed after this saga's update (fields {changed or 'other than ours'}, "
            f"last modified {now[_STAMP]}); not reverted: a human must decide which change stands"
        )
    if not _patch(api, record_id, {f: before[f] for f in names}, now[_STAMP]):
        raise ConflictError(f"{sobject} {record_id} changed while it was being reverted; not reverted")


def _compare(api: Any, record_id: str, wrote: Mapping[str, Any], before: Mapping[str, Any]) -> tuple[dict[str, Any], Observation | None]:
    now = _read(api, record_id, sorted(set(wrote) | set(before)))
    if all(now[f] == before[f] for f in before):
        return now, Observation(exists=True, reversed_=True, detail="the touched fields hold their values from before")
    if all(now[f] == wrote[f] for f in wrote):
        return now, None
    other = sorted(f for f in wrote if now[f] != wrote[f])
    return now, Observation(None, detail=f"fields {other} hold values neither before nor from this saga")


@reconciler("salesforce.update")
def observe_update(*, sobject: str, record_id: str, fields: dict[str, Any], before: dict[str, Any],
                   snapshot_modified: str, credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    """Did the patch land? Only the fields the saga touched are compared."""
    _record_id(record_id)
    api = _sobject(credential_ref, sobject)
    now, seen = _compare(api, record_id, fields, before)
    if now[_STAMP] == snapshot_modified:
        return Observation(exists=False, detail="the record is unchanged since the snapshot")
    if seen is not None:
        return seen
    return Observation(exists=True, reversed_=False, detail="the touched fields hold what the saga wrote", result={
        "sobject": sobject, "id": record_id, "last_modified": now[_STAMP],
        "wrote": {f: now[f] for f in fields}})


@reconciler("salesforce.revert")
def observe_revert(*, sobject: str, record_id: str, before: dict[str, Any], wrote: dict[str, Any],
                   credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    """Is the revert in effect? A flow that rewrote a field after it is caught here."""
    _record_id(record_id)
    _, seen = _compare(_sobject(credential_ref, sobject), record_id, wrote, before)
    return seen or Observation(exists=True, reversed_=False, detail="the touched fields hold what the saga wrote")
