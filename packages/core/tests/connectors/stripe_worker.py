"""A worker process: one saga that charges through the Stripe connector, then fails.

usage: python stripe_worker.py WAL. The local Stripe server may kill it mid-charge.
"""

from __future__ import annotations

import sys

import stripe_config  # noqa: F401

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.connectors.stripe import charge

with FileWAL(sys.argv[1]) as wal:
    try:
        with saga_scope(wal, name="checkout") as s:
            charge(4200, "usd", "tok_visa", credential_ref="stripe_test")
            raise RuntimeError("shipping refused the order")
    except SagaAborted as aborted:
        print(aborted.report.format_text())
