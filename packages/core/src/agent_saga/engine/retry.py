"""RetryPolicy: bounded retries with backoff, inside one step.

Every attempt of a step reuses the step's idempotency key: a key that changed per
attempt would make the second try of a refund look like a fresh refund.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent_saga.errors import CompensationRefused, CompensationUnproven, ConfigurationError, StepRefused

__all__ = ["COMPENSATION_RETRY", "RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, how patiently, and on which errors to try again.

    ``retry_on`` lists the exception types worth another attempt; ``give_up_on``
    wins over it. A refusal by the gate is never retried, nor a handler's refusal of
    what it was asked (``CompensationRefused``), nor an undo its system reported done without
    a proof (``CompensationUnproven``): asking again gets the same answer. The step's ``timeout``
    applies to each attempt separately, never to the whole loop.
    """

    max_attempts: int = 3
    backoff: Literal["exponential", "linear", "constant"] = "exponential"
    base_delay: float = 0.1
    max_delay: float = 10.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.backoff not in ("exponential", "linear", "constant"):
            raise ConfigurationError(
                f"RetryPolicy.backoff must be 'exponential', 'linear' or 'constant', got {self.backoff!r}"
            )
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigurationError("RetryPolicy delays must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if self.backoff == "exponential":
            raw = self.base_delay * (2 ** (attempt - 1))
        elif self.backoff == "linear":
            raw = self.base_delay * attempt
        else:
            raw = self.base_delay
        return float(min(raw, self.max_delay))

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether failed attempt ``attempt`` with ``error`` deserves another try."""
        if attempt >= self.max_attempts or isinstance(error, (StepRefused, CompensationRefused, CompensationUnproven)):
            return False
        if self.give_up_on and isinstance(error, self.give_up_on):
            return False
        return isinstance(error, self.retry_on)


#: How an undo is retried unless the saga says otherwise (SagaOptions.compensation_retry).
COMPENSATION_RETRY = RetryPolicy(max_attempts=3, backoff="exponential", base_delay=0.05)
