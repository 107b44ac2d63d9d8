"""Approvals across processes: an agent blocks, a person answers from another process.

The agent is a real subprocess (``approval_agent.py``); the approver is the real
``agent-saga approvals`` CLI; notifications go to a real HTTP server in this
process. Crash tests SIGKILL the waiting agent and start it again with the same
saga id.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from approval_support import AGENT, Hook, of_type, trusted_key, wait_for
from gate_support import redis_url

from agent_saga.approvals import FileApprovalStore, RedisApprovalStore, Status
from agent_saga.audit import verify_log
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold

pytestmark = pytest.mark.slow


class World:
    def __init__(self, tmp: Path, hook: Hook, store: str) -> None:
        self.tmp, self.hook, self.store = tmp, hook, store
        self.wal = tmp / "agent.wal"
        self.effects = tmp / "effects.txt"
        self.procs: list[subprocess.Popen[str]] = []
        # One-time setup: the approver's key where the CLI looks, trusted where the agent looks.
        trusted_key().save()

    def agent(self, saga: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(AGENT), "--store", self.store, "--wal", str(self.wal), "--saga", saga,
             "--hook", self.hook.url, "--effects", str(self.effects)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.procs.append(proc)
        return proc

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_saga", "approvals", *args, "--store", self.store],
                              capture_output=True, text=True, timeout=60, check=False)

    def shown_id(self) -> str:
        """The id `approvals list` shows for the one pending request (as a person would copy it)."""
        out = self.cli("list")
        assert out.returncode == 1, out.stdout + out.stderr  # 1: something is waiting
        (shown,) = re.findall(r"id ([0-9a-f]+)\)", out.stdout)
        return shown

    def asked(self) -> bool:
        """One notification delivered, and the store knows it (so a restart must not ask again)."""
        entries = FileApprovalStore(self.store).entries()
        return self.hook.count == 1 and len(entries) == 1 and entries[0].notified == (0,)

    def effects_count(self) -> int:
        return self.effects.read_text().count("\n") if self.effects.exists() else 0

    def records(self) -> list[dict[str, object]]:
        return list(read_records(self.wal))

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def world(tmp_path: Path, hook: Hook) -> Iterator[World]:
    w = World(tmp_path, hook, str(tmp_path / "approvals"))
    yield w
    w.close()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out + err


def test_an_agent_blocks_until_a_person_approves_from_the_cli(world: World) -> None:
    agent = world.agent("saga-e2e")
    wait_for(lambda: world.hook.count == 1, "the first notification")
    shown = world.shown_id()
    assert len(shown) == 8 and world.effects_count() == 0  # nothing moved while it waited
    listing = world.cli("list").stdout
    assert "[PENDING] wire.send" in listing and "amount: 80000" in listing and "to: acct_9" in listing

    out = world.cli("approve", f"{shown}...", "--approver", "risk@corp", "--note", "verified by phone")
    assert out.returncode == 0, out.stderr
    code, output = finish(agent)
    assert code == 0, output
    assert world.effects_count() == 1

    records = world.records()
    (granted,) = of_type(records, "APPROVAL_GRANTED")
    body = granted["body"]
    assert isinstance(body, dict)
    assert body["approver"] == "risk@corp" and body["note"] == "verified by phone"
    assert body["args"] == {"amount": 80000, "to": "acct_9"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", str(body["decided_at"]))
    assert granted["saga"] == "saga-e2e" and granted["step"] == 1
    # asked, in the log, before the step's intent; decided before it too
    kinds = [r["type"] for r in records if r["type"].startswith(("APPROVAL_", "STEP_"))]  # type: ignore[union-attr]
    assert kinds == ["APPROVAL_REQUESTED", "APPROVAL_GRANTED", "STEP_INTENT", "STEP_COMMITTED"]
    assert verify_log(world.wal).ok
    # the CLI's answer left nothing pending
    assert world.cli("list").returncode == 0


def test_a_killed_agent_restarted_finds_its_request_and_the_decision_made_while_it_was_dead(world: World) -> None:
    first = world.agent("saga-crash")
    wait_for(world.asked, "the first notification, recorded as delivered")
    shown = world.shown_id()
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert world.effects_count() == 0

    # The person answers while no agent is running at all; the log gets it from the CLI.
    out = world.cli("approve", shown, "--approver", "risk@corp", "--note", "verified by phone",
                    "--wal-path", str(world.wal))
    assert out.returncode == 0, out.stderr

    second = world.agent("saga-crash")
    code, output = finish(second)
    assert code == 0, output
    assert world.effects_count() == 1
    assert world.hook.count == 1  # nobody was asked a second time
    records = world.records()
    assert len(of_type(records, "APPROVAL_REQUESTED")) == 1
    assert len(of_type(records, "APPROVAL_GRANTED")) == 1  # the CLI wrote it; the restarted agent did not again
    assert len(FileApprovalStore(world.store).entries()) == 1
    assert verify_log(world.wal).ok


def test_a_killed_agent_restarted_waits_on_the_same_request_without_asking_again(world: World) -> None:
    first = world.agent("saga-restart")
    wait_for(world.asked, "the first notification, recorded as delivered")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    # To recovery the dead saga has no step yet: waiting for a person is not an effect in flight.
    (view,) = fold(read_records(world.wal)).values()
    assert view.open and view.steps == {}

    second = world.agent("saga-restart")
    assert second.stdout is not None
    assert second.stdout.readline().strip() == "WAITING"
    # It is waiting on the existing request: still one request, still one notification.
    shown = world.shown_id()
    store = FileApprovalStore(world.store)
    (entry,) = store.entries()
    assert entry.id.startswith(shown) and entry.status is Status.PENDING

    out = world.cli("deny", shown, "--approver", "risk@corp", "--note", "amount too large")
    assert out.returncode == 0, out.stderr
    code, output = finish(second)
    assert code == 1 and "denied by risk@corp: amount too large" in output
    assert world.effects_count() == 0
    assert world.hook.count == 1
    records = world.records()
    assert len(of_type(records, "APPROVAL_REQUESTED")) == 1
    (denied,) = of_type(records, "APPROVAL_DENIED")
    assert denied["body"]["approver"] == "risk@corp"  # type: ignore[index]
    assert len(of_type(records, "STEP_REFUSED")) == 1 and not of_type(records, "STEP_INTENT")
    assert verify_log(world.wal).ok


@pytest.mark.redis
def test_the_same_flow_through_redis(tmp_path: Path, hook: Hook) -> None:
    url = redis_url()
    world = World(tmp_path, hook, url)  # the agent and the CLI meet only through the URL
    saga = f"saga-redis-{uuid.uuid4().hex}"
    try:
        agent = world.agent(saga)
        wait_for(lambda: world.hook.count == 1, "the first notification")
        store = RedisApprovalStore(url)
        (entry,) = [e for e in store.entries() if e.saga_id == saga]
        out = world.cli("approve", entry.id[:12], "--approver", "risk@corp", "--note", "verified by phone")
        assert out.returncode == 0, out.stderr
        code, output = finish(agent)
        assert code == 0, output
        assert world.effects_count() == 1
        (granted,) = of_type(world.records(), "APPROVAL_GRANTED")
        assert granted["body"]["approver"] == "risk@corp"  # type: ignore[index]
        decided = store.get(entry.id)
        assert decided is not None and decided.status is Status.GRANTED
        store.client.close()
    finally:
        world.close()
