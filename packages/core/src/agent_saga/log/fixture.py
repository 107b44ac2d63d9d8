"""Telling a synthetic log (a test fixture) from evidence.

``agent_saga.synthetic.synthesize`` marks every record it makes twice: its body holds
``"__synthetic__": true`` and its saga id starts with ``synthetic-``. The saga id is in
the header the hash chain covers, so the mark survives a redaction that erases the
body. An audit log that cannot be told from a real one is an instrument for
fabricating evidence, so ``certify`` and ``export`` refuse a log holding either mark
unless told it is a fixture (``synthetic_ok=True``, ``--synthetic-ok``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_saga.errors import WALError

__all__ = ["SYNTHETIC_MARK", "SYNTHETIC_SAGA_PREFIX", "SyntheticLog", "is_synthetic", "synthetic_note"]

#: The body key every synthetic record carries.
SYNTHETIC_MARK = "__synthetic__"
#: The start of every synthetic saga id (in the chained header, so a redaction cannot remove it).
SYNTHETIC_SAGA_PREFIX = "synthetic-"


def is_synthetic(record: Mapping[str, Any]) -> bool:
    """True when ``record`` was made by ``synthesize`` (either mark is enough)."""
    saga = record.get("saga")
    if isinstance(saga, str) and saga.startswith(SYNTHETIC_SAGA_PREFIX):
        return True
    body = record.get("body")
    return isinstance(body, Mapping) and body.get(SYNTHETIC_MARK) is True


def synthetic_note(synthetic: int, records: int) -> str:
    """The line certify and export print when they were told a synthetic log is a fixture."""
    return (
        f"SYNTHETIC: {synthetic} of {records} record(s) are marked {SYNTHETIC_MARK}; this is a "
        "test fixture (synthetic_ok, --synthetic-ok), not evidence of what an agent did"
    )


class SyntheticLog(WALError):
    """A log with synthetic records was offered as evidence (certify, export)."""

    def __init__(self, where: object, synthetic: int, records: int, what: str, override: str) -> None:
        super().__init__(
            f"refusing to {what}: {where} holds {synthetic} of {records} record(s) marked "
            f"{SYNTHETIC_MARK} (made by synthesize), which are not evidence of what an agent did; "
            f"{override}"
        )
        self.synthetic = synthetic
        self.records = records
