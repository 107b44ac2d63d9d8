from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def pg_url() -> str:
    """The PostgreSQL the tests use (``AGENT_SAGA_TEST_PG_URL``); unset, the test fails saying how to start it."""
    url = os.environ.get("AGENT_SAGA_TEST_PG_URL")
    if not url:
        pytest.fail("AGENT_SAGA_TEST_PG_URL is not set: run `scripts/services start` and "
                    "`eval \"$(scripts/services env)\"` (or run the suite through scripts/test)")
    return url


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from salesforce_server import make_certificate

    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def salesforce_server(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A local Salesforce over https, trusted by requests, and credential "sf_test" resolving to a session."""
    from salesforce_server import SalesforceServer

    from agent_saga.connectors import set_credential_resolver

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificate[0]))
    with SalesforceServer(*certificate) as server:
        login = {"instance_url": server.url, "session_id": server.session_id}
        set_credential_resolver(lambda name: {"sf_test": login}[name])
        try:
            yield server
        finally:
            set_credential_resolver(None)
