"""Shared helpers for the gate tests: requests, a clock we move by hand, an approver, Redis access."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable
from typing import Any

import pytest

from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalDecision, ApprovalRequest, set_breaker, set_limit_store, set_switch
from agent_saga.semantics import ActionSemantics

DEFAULT_REDIS = "redis://127.0.0.1:6399/0"


def req(
    tool: str = "stripe.charge",
    semantics: ActionSemantics | str = "COMPENSABLE",
    *,
    saga: str = "saga-1",
    step: int = 1,
    tags: tuple[str, ...] = (),
    **args: Any,
) -> StepRequest:
    return StepRequest(saga, step, tool, ActionSemantics.parse(semantics), dict(args), frozenset(tags))


class Clock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Approver:
    """An approval provider that answers from a function and remembers every request."""

    def __init__(self, answer: bool | Callable[[ApprovalRequest], Any] = True, who: str = "risk@corp") -> None:
        self.answer = answer
        self.who = who
        self.requests: list[ApprovalRequest] = []

    def _decide(self, request: ApprovalRequest) -> Any:
        self.requests.append(request)
        if callable(self.answer):
            return self.answer(request)
        return ApprovalDecision(self.answer, self.who, "checked by phone" if self.answer else "no")

    def request_approval(self, request: ApprovalRequest) -> Any:
        return self._decide(request)

    async def request_approval_async(self, request: ApprovalRequest) -> Any:
        return self._decide(request)


def reset_gate_globals() -> None:
    set_breaker(None)
    set_limit_store(None)
    set_switch(None)


def redis_url() -> str:
    """REDIS_URL if set (it must answer), else the scripts/services default (skip if absent)."""
    explicit = os.environ.get("REDIS_URL")
    url = explicit or DEFAULT_REDIS
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        # A backend is tested against the real server or not at all: never skipped.
        pytest.fail(f"no Redis answers at {url} ({err}); start one with scripts/services start "
                    "(scripts/test does this) or point REDIS_URL at one")
    finally:
        client.close()
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_port() -> int:
    """A free port for a server process of the test's own (redis-server, PostgreSQL) to bind.

    Not free_port(): that port comes from the kernel's ephemeral range, where every bind to
    port 0 on the machine is served at random. Between the choice and the server's bind (an
    initdb, or an outage the test stages before starting the server again on the same port) a
    parallel test's HTTP server may be handed the same port, and the server cannot start. Below
    net.ipv4.ip_local_port_range only explicit binds land; one that is taken now is skipped.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default range starts here
    ports = range(max(1024, low - 12000), low)
    pick = random.SystemRandom()  # not the random module's state, which a test (or Hypothesis) may seed
    for _ in range(200):
        port = pick.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken now
        return port
    return free_port()


# Sockets holding the ports dead_port() handed out, for as long as this process runs.
_held: list[socket.socket] = []


def dead_port() -> int:
    """A port where nothing answers, and nothing can start answering while this process runs.

    Bound and never listened on: a connection is refused at once. A port merely found free
    (free_port) may be taken by another process (a parallel test's server, an outgoing
    connection's local port) before the test connects to it, and then something answers.
    """
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _held.append(s)
    port: int = s.getsockname()[1]
    return port
