"""ReconcilePolicy: how patiently the engine asks the outside system about a lost response.

When a step's forward call raises, the effect may still have landed (the response was
lost, the call timed out after the provider took it). If a ``@reconciler`` is registered
under the tool's name, the engine asks it — after a short delay, a bounded number of
times, each question under a timeout — before deciding what the step is:

* it landed: the step is COMMITTED, with the provider's result feeding its undo;
* it certainly did not: nothing to undo (NOT_APPLIED), and the retry policy may run it
  again with the same idempotency key;
* nobody can tell: UNKNOWN, as without a reconciler.

Every question and every answer is a record of the log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent_saga.errors import ConfigurationError

__all__ = ["DEFAULT_RECONCILE", "ReconcilePolicy"]


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """``attempts`` questions at most, the first after ``delay`` seconds, each later one
    ``backoff`` times further apart, each bounded by ``timeout`` seconds."""

    delay: float = 0.2
    attempts: int = 3
    backoff: float = 2.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ConfigurationError(f"ReconcilePolicy.attempts must be an integer >= 1, got {self.attempts!r}")
        for name in ("delay", "backoff", "timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or not math.isfinite(value):
                raise ConfigurationError(f"ReconcilePolicy.{name} must be a finite number >= 0, got {value!r}")
        if self.timeout <= 0:
            raise ConfigurationError("ReconcilePolicy.timeout must be positive: a question that never ends is not one")

    def wait_before(self, attempt: int) -> float:
        """Seconds to wait before question number ``attempt`` (1-based)."""
        return float(self.delay * (self.backoff ** (attempt - 1)))


DEFAULT_RECONCILE = ReconcilePolicy()
