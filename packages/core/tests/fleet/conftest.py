"""Servers for the fleet tests: the shared ones `scripts/services` starts, and throwaway ones.

A missing server fails the test with the command that starts it; nothing here skips.
Each test gets logs of its own (a fresh log name), so tests never see each other's records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from servers import pg_url, redis_url

from agent_saga.log.resolve import open_log


@pytest.fixture(scope="session")
def pg() -> str:
    return pg_url()


@pytest.fixture(scope="session")
def rd() -> str:
    return redis_url()


def _with_log(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}log={name}"


@pytest.fixture(params=["postgres", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_url(backend: str, request: pytest.FixtureRequest) -> Callable[[], str]:
    """Makes the URL of a fresh, empty log on this test's backend."""
    base = request.getfixturevalue("pg" if backend == "postgres" else "rd")

    def make() -> str:
        return _with_log(base, f"t-{uuid.uuid4().hex[:12]}")

    return make


@pytest.fixture
def url(new_url: Callable[[], str]) -> str:
    return new_url()


@pytest.fixture
def server_wal(url: str) -> Iterator[object]:
    wal = open_log(url)
    yield wal
    wal.close()
