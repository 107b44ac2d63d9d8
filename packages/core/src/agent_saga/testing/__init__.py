"""The conformance suite every framework adapter's tests subclass.

``from agent_saga.testing import AdapterConformance`` imports pytest; nothing else in
agent-saga does.
"""

from agent_saga.testing.conformance import (
    UNDO_HANDLER,
    AdapterConformance,
    Call,
    ledger,
    root_cause,
)
from agent_saga.testing.parallel import AWAITED, CANCELLED, RUN_ON

__all__ = ["AWAITED", "CANCELLED", "RUN_ON", "UNDO_HANDLER", "AdapterConformance", "Call", "ledger", "root_cause"]
