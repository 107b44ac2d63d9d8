"""The undo the recovery-verdict tests record: on a file log (test_recovery_evidence) and on the servers.

A record names ``evidence.refund``; the daemon's run of it is noted in ``refunds`` (a ref
starting ``FAIL`` fails, as a card network that is down), cleared around each test by the
autouse ``fresh_refunds`` a test module imports. ``later`` is the daemon's clock an hour on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agent_saga import compensator

__all__ = ["LATER", "fresh_refunds", "later", "refund", "refunds"]

LATER = 3600.0  # how far the daemon's clock is set ahead: every lease has long expired

refunds: list[str] = []


@compensator("evidence.refund")
def refund(ref: str, idempotency_key: str | None = None) -> None:
    refunds.append(ref)
    if ref.startswith("FAIL"):
        raise RuntimeError("the card network is down")


@pytest.fixture(autouse=True)
def fresh_refunds() -> Iterator[None]:
    refunds.clear()
    yield
    refunds.clear()


def later() -> float:
    return time.time() + LATER
