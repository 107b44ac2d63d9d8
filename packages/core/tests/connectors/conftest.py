from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from stripe_server import StripeServer  # noqa: E402


@pytest.fixture
def stripe_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[StripeServer]:
    """A local Stripe, the real SDK pointed at it, and credential "stripe_test" resolving to its key."""
    import stripe

    from agent_saga.connectors import set_credential_resolver

    with StripeServer() as server:
        monkeypatch.setattr(stripe, "api_base", server.url)
        monkeypatch.setenv("STRIPE_API_BASE", server.url)
        monkeypatch.setenv("STRIPE_TEST_KEY", server.api_key)
        set_credential_resolver(lambda name: {"stripe_test": server.api_key}[name])
        try:
            yield server
        finally:
            set_credential_resolver(None)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGENT_SAGA_LEASE_TTL"] = "0.3"
    env.update(extra)
    return env
