"""A saga several devices wrote to is one saga: how readers tell its parts apart and when it ends.

In a merged mesh log (``agent_saga.mesh._merge``) each record names its device under
``"mesh"``. ``recovery.fold`` and ``audit._certify`` keep, per saga, how each
device's part ended, and end the saga by ``spanning_end``; compaction
(``log.rewrite.settled_sagas``) removes such a saga only once it is settled as a
whole. Any other log has no parts, and its sagas end as before: at their end
record. It sits in the log layer because compaction needs it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_saga.log.records import RecordType

__all__ = ["part_of", "spanning_end"]

_COMPLETED = RecordType.SAGA_COMPLETED.value
_ROLLED_BACK = RecordType.SAGA_ROLLED_BACK.value


def part_of(record: Mapping[str, Any]) -> str:
    """The device whose part of a saga ``record`` belongs to, in a merged mesh log ('' otherwise).

    A record written to the merged log itself (by the recovery daemon) carries no origin: it is
    the log's own, and its end record ends the whole saga.
    """
    origin = record.get("mesh")
    device = origin.get("device") if isinstance(origin, dict) else None
    return device if isinstance(device, str) else ""


def spanning_end(parts: Mapping[str, str | None]) -> str | None:
    """How a saga several devices wrote to has ended (None: still open): one verdict, not one per device.

    Open while any device's part is; rolled back if any part rolled back (the other parts' effects
    then stand unless compensated, which certify and recovery must see); an end record that the
    merged log's own writer (the recovery daemon) appended decides alone.
    """
    if "" in parts:
        return parts[""]
    if any(end is None for end in parts.values()):
        return None
    return _ROLLED_BACK if _ROLLED_BACK in parts.values() else _COMPLETED
