"""agent-saga's pytest plugin: the ``assert_rollback_proven`` fixture.

pytest loads it through the ``pytest11`` entry point of the agent-saga
distribution. It lives outside the ``agent_saga`` package, as Hypothesis's plugin
does, so that loading it imports nothing of agent_saga: entry-point plugins load
before pytest-cov starts measuring, and every line agent_saga runs at import
would otherwise be missed; nor does a test run that never asks for the fixture
pay for the import. ``agent_saga`` itself never imports pytest.

    async def test_onboarding_is_safe(assert_rollback_proven):
        await assert_rollback_proven(scenario, snapshot=world.snapshot, reset=world.reset)

Disable it with ``-p no:agent_saga``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agent_saga.proving import RollbackProof

__all__ = ["assert_rollback_proven"]


@pytest.fixture
def assert_rollback_proven() -> Callable[..., Awaitable[RollbackProof]]:
    """An async check: prove the scenario's rollback, or fail the test with the proof's text.

    Takes what ``agent_saga.proving.prove_rollback`` takes and returns the proof
    when it holds. Await it from an async test (pytest-asyncio, or anyio on its
    asyncio backend).
    """
    from agent_saga.proving import prove_rollback

    async def check(
        scenario: Callable[[Any], Any],
        *,
        snapshot: Callable[[], Any],
        reset: Callable[[], Any] | None = None,
        **options: Any,
    ) -> RollbackProof:
        proof = await prove_rollback(scenario, snapshot=snapshot, reset=reset, **options)
        if not proof.proven:
            pytest.fail(proof.format_text(), pytrace=False)
        return proof

    return check
