"""Semantic locks across real processes, on Redis and on Postgres; a SIGKILLed holder's lock expires."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from agent_saga import MemoryWAL, SagaAborted, saga_scope
from agent_saga.isolation import LockHeld, PostgresSemanticLocks, RedisSemanticLocks, SemanticLockManager

LOCKER = str(Path(__file__).parent / "locker.py")


@pytest.fixture(params=["redis", "postgres"])
def target(request: pytest.FixtureRequest) -> tuple[str, str]:
    kind = str(request.param)
    return kind, request.getfixturevalue("rd" if kind == "redis" else "pg")


def locker(kind: str, url: str, resource: str, wait: float, hold: float | str, die: bool = False,
           ttl: float = 1.0) -> subprocess.Popen[str]:
    argv = [sys.executable, LOCKER, kind, url, resource, str(wait), str(hold)] + (["die"] if die else [])
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "LOCK_TTL": str(ttl)})


def manager(kind: str, url: str) -> SemanticLockManager:
    return RedisSemanticLocks(url) if kind == "redis" else PostgresSemanticLocks(url)


def lines(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -9), err
    return out.splitlines()


def wait_for_line(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(word), (line, proc.stderr.read() if proc.stderr else "")
    return line


def test_two_processes_never_hold_the_same_resource(target: tuple[str, str]) -> None:
    kind, url = target
    resource = f"account:{uuid.uuid4().hex[:8]}"
    # A 30 s lease: on the default 1 s one, a first holder descheduled for a second (a loaded CI
    # machine; SIGSTOP for 1.2 s shows it) lets its lock lapse and the second process takes it.
    first = locker(kind, url, resource, 0, "stdin", ttl=30.0)
    held_at = float(wait_for_line(first, "held").split()[1])
    refused = lines(locker(kind, url, resource, 0, 0))
    assert refused[0].startswith("refused") and "is held by saga" in refused[0]
    waiting = locker(kind, url, resource, 60, 0)  # waits for the first saga to end
    # Released only once the waiter found it held: a waiter that started late (seen: a 2 s stall
    # of its start) took a free lock and the test passed without anyone having waited.
    wait_for_line(waiting, "waiting")
    first_out = lines(first)  # (closing its stdin lets the first saga end)
    waiter = lines(waiting)
    released_at = float(first_out[0].split()[1])
    assert first_out[1] == "free"  # the saga's end released it
    got_at = float(waiter[0].split()[1])
    assert waiter[0].startswith("held") and held_at < released_at <= got_at


def test_a_sigkilled_holders_lock_expires(target: tuple[str, str]) -> None:
    kind, url = target
    resource = f"order:{uuid.uuid4().hex[:8]}"
    dead = locker(kind, url, resource, 0, 0, die=True, ttl=3.0)
    out = lines(dead)
    assert dead.returncode == -9 and out[0].startswith("held")
    locks = manager(kind, url)
    try:
        with pytest.raises(LockHeld):  # nobody released it ...
            locks.acquire(resource, saga="next")
        assert locks.acquire(resource, saga="next", wait=30) == "next"  # ... but its lease runs out
    finally:
        locks.close()


def test_locks_release_on_abort_and_are_reentrant_in_process(target: tuple[str, str]) -> None:
    kind, url = target
    locks = manager(kind, url)
    resource = f"doc:{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(SagaAborted), saga_scope(MemoryWAL()) as s:
            assert locks.acquire(resource) == s.saga_id
            assert locks.acquire(resource) == s.saga_id  # the same saga again: no-op
            with pytest.raises(LockHeld):
                locks.acquire(resource, saga="another-saga")
            raise RuntimeError("the model gave up")
        assert locks.holder(resource) is None  # released by the rollback
    finally:
        locks.close()


def test_the_process_local_manager_refuses_a_second_saga_and_expires() -> None:
    # The refusal on a 30 s lease: on a 0.3 s one, a process descheduled for 0.3 s between the two
    # calls (a loaded CI machine) would find the lease already run out, with nothing wrong.
    locks = SemanticLockManager(ttl=30)
    try:
        locks.acquire("r", saga="a")
        with pytest.raises(LockHeld, match="held by saga a"):
            locks.acquire("r", saga="b")
    finally:
        locks.close()
    short = SemanticLockManager(ttl=0.3)
    try:
        short.acquire("q", saga="a")
        short._stop.set()  # stop renewing, as a frozen holder would
        time.sleep(0.5)
        assert short.acquire("q", saga="b", wait=1.0) == "b"
    finally:
        short.close()



def test_first_users_of_a_new_postgres_lock_table_at_once_all_start(pg: str) -> None:
    # Concurrent CREATE TABLE IF NOT EXISTS of one name fails all but one with a unique violation
    # in the catalog (13 of 15 rounds of six, before the schema lock).
    for _ in range(5):
        assert _first_users_at_once(pg, f"locks_{uuid.uuid4().hex[:12]}", 6) == []


def _first_users_at_once(url: str, table: str, n: int) -> list[BaseException]:
    start, errors = threading.Barrier(n), []

    def first_user() -> None:
        start.wait()
        try:
            PostgresSemanticLocks(url, table=table).close()
        except BaseException as err:
            errors.append(err)

    users = [threading.Thread(target=first_user) for _ in range(n)]
    for user in users:
        user.start()
    for user in users:
        user.join()
    return errors
