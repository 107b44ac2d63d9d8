"""The gate's Redis stores against a real server: fleets, crashes, a dead server, a restarted one.

These run against ``$REDIS_URL`` (``scripts/services start``); with REDIS_URL set
and no server answering they fail rather than skip. The restart test starts
its own ``redis-server`` on a free port, kills it and starts it again.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gate_support import Clock, dead_port, redis_url, req, server_port
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import BreakerPolicy, BudgetLimit, CircuitBreaker, KillSwitch, PreFlightGate, StepRefused
from agent_saga.cli.main import main
from agent_saga.gate import MemoryLimitStore, RedisBreakerStore, RedisLimitStore, RedisSwitchStore, tool_is
from agent_saga.gate._stores import Charge

DEAD = "redis://127.0.0.1:{port}/0"


pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("fresh_gate_globals")]


@pytest.fixture
def url() -> str:
    return redis_url()


@pytest.fixture
def prefix(url: str) -> Iterator[str]:
    """A key prefix of this test's own, deleted afterwards."""
    import redis

    name = f"agent-saga-test:{uuid.uuid4().hex}:"
    yield name
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(f"{name}*"))
    if keys:
        client.delete(*keys)
    client.close()


# -- fleets and crashes -------------------------------------------------------------------------

CHARGER = textwrap.dedent("""
    import os, sys, time
    from agent_saga import BudgetLimit, Compensation, MemoryWAL, PreFlightGate, SagaAborted, saga_scope
    from agent_saga.gate import MemoryLimitStore, RedisLimitStore

    kind, url, prefix, go, count, crash = sys.argv[1:]
    store = RedisLimitStore(url, prefix=prefix) if kind == "redis" else MemoryLimitStore()
    gate = PreFlightGate(limits=[BudgetLimit("daily-spend", arg="amount", max_total=50_000, window=86_400)],
                         store=store)
    while not os.path.exists(go):
        time.sleep(0.005)
    allowed = 0
    for i in range(int(count)):
        try:
            with saga_scope(MemoryWAL(), gate=gate) as s:
                s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=lambda: {"id": i},
                          compensate=lambda r: Compensation(fn=lambda: None), args={"amount": 999})
            allowed += 1
        except SagaAborted:
            pass
    print(allowed, flush=True)
    if crash == "crash":
        os._exit(0)  # no cleanup of any kind
""")


def charge_from_processes(tmp_path: Path, kind: str, url: str, prefix: str, processes: int, each: int,
                          crash: bool = False) -> list[int]:
    go = tmp_path / f"go-{uuid.uuid4().hex}"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", CHARGER, kind, url, prefix, str(go), str(each), "crash" if crash else "-"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(processes)
    ]
    go.touch()  # all start charging together
    counts = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        counts.append(int(out.strip()))
    return counts


@pytest.mark.slow
def test_four_processes_sharing_redis_allow_exactly_50_charges_of_999(tmp_path: Path, url: str, prefix: str) -> None:
    counts = charge_from_processes(tmp_path, "redis", url, prefix, processes=4, each=250)
    assert sum(counts) == 50  # 50 x 999 = 49,950; the 51st would pass 50,000


@pytest.mark.slow
def test_four_processes_with_the_in_process_store_each_grant_the_full_budget(
    tmp_path: Path, url: str, prefix: str
) -> None:
    # Why a fleet needs RedisLimitStore: each process meters only itself, so the cap is 4x.
    counts = charge_from_processes(tmp_path, "memory", url, prefix, processes=4, each=250)
    assert counts == [50, 50, 50, 50]


@pytest.mark.slow
def test_spend_windows_survive_a_crash_only_in_redis(tmp_path: Path, url: str, prefix: str) -> None:
    assert charge_from_processes(tmp_path, "redis", url, prefix, 1, 40, crash=True) == [40]
    assert charge_from_processes(tmp_path, "redis", url, prefix, 1, 20) == [10]  # the window outlived the crash
    # The in-process default forgets: a crash-looping agent spends the budget again.
    assert charge_from_processes(tmp_path, "memory", url, prefix, 1, 40, crash=True) == [40]
    assert charge_from_processes(tmp_path, "memory", url, prefix, 1, 20) == [20]


# -- the Lua script's semantics match the in-process store -------------------------------------


def test_redis_limits_are_all_or_nothing_hand_back_refusals_and_slide(url: str, prefix: str) -> None:
    clock = Clock(5_000.0)
    store = RedisLimitStore(url, prefix=prefix, clock=clock)
    gate = PreFlightGate(limits=[
        BudgetLimit("total", arg="amount", max_total=100, window=10),
        BudgetLimit("per-customer", arg="amount", max_total=60, window=10,
                    scope=lambda r: f"c={r.args['customer_id']}"),
    ], store=store)
    gate.check(req(amount=50, customer_id="a"))
    with pytest.raises(StepRefused, match="per-customer"):
        gate.check(req(amount=20, customer_id="a"))
    gate.check(req(amount=50, customer_id="b"))  # 100: "total" kept nothing of the refused 20
    with pytest.raises(StepRefused, match="over limit 'total': 100 used of 100"):
        gate.check(req(amount=1, customer_id="c"))
    clock.advance(10)
    gate.check(req(amount=60, customer_id="a"))  # both t=0 charges left the window
    receipt = store.debit([Charge("total:*", 100, 10, 40)]).receipt
    assert store.debit([Charge("total:*", 100, 10, 1)]).refused == 0
    store.refund(receipt)
    store.refund(receipt)  # handing back twice gives back once
    assert store.debit([Charge("total:*", 100, 10, 40)]).refused is None
    assert store.debit([Charge("total:*", 100, 10, 1)]).refused == 0


def test_redis_escalation_defers_only_the_escalating_limit(url: str, prefix: str) -> None:
    store = RedisLimitStore(url, prefix=prefix)
    charges = [Charge("a:*", 100, 60, 80), Charge("b:*", 50, 60, 80, "escalate")]
    result = store.debit(charges)
    assert result.refused is None
    assert result.deferred == (1,)
    assert [key for key, _, _ in result.receipt.entries] == ["a:*"]
    forced = store.debit([Charge("b:*", 50, 60, 80, "force")])
    assert forced.refused is None
    assert store.debit([Charge("b:*", 50, 60, 1)]).total == pytest.approx(80)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 60)), min_size=1, max_size=25))
def test_redis_and_memory_stores_decide_alike(calls: list[tuple[int, int]]) -> None:
    url = redis_url()
    clock = Clock(0.0)
    prefix = f"agent-saga-test:{uuid.uuid4().hex}:"
    redis_store = RedisLimitStore(url, prefix=prefix, clock=clock)
    memory = MemoryLimitStore(clock=clock)
    try:
        for dt, amount in calls:
            clock.advance(dt)
            charge = [Charge("k", 100.0, 50.0, float(amount))]
            assert (redis_store.debit(charge).refused is None) == (memory.debit(charge).refused is None)
    finally:
        redis_store.client.delete(f"{prefix}k:log", f"{prefix}k:sum")
        redis_store.client.close()


def test_a_shared_breaker_trips_probes_and_recovers_across_processes(url: str, prefix: str) -> None:
    clock = Clock()
    policy = BreakerPolicy(failure_threshold=2, failure_rate=None, cool_down=30)
    # Two breakers standing for two processes: what one sees, the other acts on.
    a = CircuitBreaker(policy, store=RedisBreakerStore(url, prefix=prefix), clock=clock)
    b = CircuitBreaker(policy, store=RedisBreakerStore(url, prefix=prefix), clock=clock)
    for breaker in (a, b):
        r = req("stripe.charge")
        breaker.before(r)
        breaker.observe(r, ConnectionError("down"))
    with pytest.raises(StepRefused, match="circuit open"):
        b.before(req("stripe.charge"))
    clock.advance(30)
    trial = req("stripe.charge")
    assert a.before(trial) is True
    with pytest.raises(StepRefused):
        b.before(req("stripe.charge"))  # exactly one trial, fleet-wide
    a.observe(trial, None)
    assert b.before(req("stripe.charge")) is False
    assert not a.degraded


# -- an unreachable server, and a restarted one ------------------------------------------------


def test_a_dead_server_fails_limits_closed_and_the_breaker_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = DEAD.format(port=dead_port())
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=100, window=60)],
                         store=RedisLimitStore(dead, timeout=0.2))
    with pytest.raises(StepRefused, match="limit store unreachable") as info:
        gate.check(req(amount=1))
    assert info.value.rule == "limit:b"
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=1, failure_rate=None),
                             store=RedisBreakerStore(dead, timeout=0.2))
    r = req("x")
    assert breaker.before(r) is False  # the call is made
    breaker.observe(r, OSError("x failed"))
    assert breaker.degraded
    with pytest.raises(StepRefused):
        breaker.before(req("x"))  # and it still trips, from this process's state
    assert main(["status", "--store", dead]) == 3
    assert "could not use the switch store" in capsys.readouterr().err


class OwnRedis:
    """A redis-server of this test's own, with an append-only file so a restart keeps its data."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not on PATH; scripts/services start installs it (scripts/test does this)")
        self.binary = binary
        self.dir = directory
        self.port = server_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.kill()


def wait_reachable(client: Any) -> None:
    import redis

    for _ in range(200):
        try:
            client.ping()
            return
        except redis.RedisError:
            time.sleep(0.05)
    raise AssertionError("the restarted redis-server never answered")


@pytest.mark.slow
def test_redis_restarted_mid_run(own_redis: OwnRedis) -> None:
    clock = Clock()
    limits = RedisLimitStore(own_redis.url, timeout=0.5)
    breaker = CircuitBreaker(BreakerPolicy(failure_threshold=2, failure_rate=None),
                             store=RedisBreakerStore(own_redis.url, timeout=0.5))
    switch = KillSwitch(RedisSwitchStore(own_redis.url, timeout=0.5), grace=30, poll_interval=0, clock=clock)
    gate = PreFlightGate(
        limits=[BudgetLimit("spend", arg="amount", max_total=100, window=3600, when=tool_is("stripe.*"))],
        breaker=breaker, switch=switch, store=limits,
    )
    gate.check(req("stripe.charge", amount=30))
    switch.halt("tool:wire.send", reason="fraud", by="soc@corp")

    own_redis.kill()
    # Limits fail closed: an unverifiable budget is not spent.
    with pytest.raises(StepRefused, match="limit store unreachable"):
        gate.check(req("stripe.charge", amount=1))
    # The breaker keeps working, from this process's own state.
    for _ in range(2):
        r = req("pinecone.upsert")
        gate.check(r)
        gate.observe(r, ConnectionError("pinecone down"))
    assert breaker.degraded
    with pytest.raises(StepRefused, match="circuit open"):
        gate.check(req("pinecone.upsert"))
    # The switch honours the last state it read for its grace window...
    with pytest.raises(StepRefused, match="halted"):
        gate.check(req("wire.send"))
    gate.check(req("db.read"))
    # ...and then refuses everything.
    clock.advance(31)
    with pytest.raises(StepRefused, match=r"unreadable for 31\.0s \(grace 30s\)"):
        gate.check(req("db.read"))

    own_redis.start()
    wait_reachable(limits.client)
    gate.check(req("db.read"))  # the switch reads again
    with pytest.raises(StepRefused, match="fraud"):
        gate.check(req("wire.send"))  # and the halt survived the restart (append-only file)
    gate.check(req("stripe.charge", amount=70))  # 30 + 70: the window survived too
    with pytest.raises(StepRefused, match="over limit"):
        gate.check(req("stripe.charge", amount=1))
    r = req("stripe.charge", amount=0)
    gate.observe(r, None)
    assert not breaker.degraded  # back on the shared state
