"""A Hypothesis state machine over the engine and the recovery daemon, with real process kills.

An agent process (proving_worker.py) holds several sagas open at once and runs
their steps interleaved: charges whose refund is known before the call,
reservations whose release needs the result, IRREVERSIBLE notifications, calls
that land and lose their answer, calls declined before anything happened. Sagas
fail and unwind, or commit. The process is killed with SIGKILL between commands,
or dies inside a tool call after its effect landed, or inside an undo halfway
through a rollback; a fresh process carries on with new sagas on the same log.
The recovery daemon sweeps the log once the dead process's leases run out.

After every rule the world's own ledger (recovery_world: every attempt, every
applied effect, deduplicated by idempotency key) is checked against what the
engine said: nothing applied twice, the daemon never runs a forward call nor
touches a live saga, a committed saga keeps its effects, a rollback report's
verdict matches what still stands, and after recovery every effect of a dead
saga is undone or escalated to a human.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import recovery_world as world
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_profiles import examples
from recovery_checks import HERE, env_for, world_counts

from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.escalations import EscalationQueue
from agent_saga.recovery.lease import recovery_dir

WORKER = HERE / "proving_worker.py"
# Long enough that a live worker's lease (renewed every ttl/3) never lapses on a loaded
# machine: the daemon must tell live sagas from dead ones by it.
LEASE_TTL = 1.5
FORWARD = {"charge": "charge", "charge_lost": "charge", "declined": "charge", "reserve": "reserve",
           "reserve_lost": "reserve", "notify": "notify"}
UNDO = {"charge": "refund", "reserve": "release", "notify": None}
KINDS = sorted(FORWARD)
MAX_OPEN = 3
ENDINGS = ["kill between steps", "die inside a call", "fail", "die inside an undo", "commit"]


@dataclass
class SagaModel:
    name: str
    saga_id: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (kind, ref); engine step = index + 1
    status: str = "open"  # open | committed | rolled_back | dead | recovered
    report: dict[str, Any] | None = None


class Worker:
    """One agent process, spoken to one JSON line at a time."""

    def __init__(self, wal: Path, world_dir: Path) -> None:
        env = env_for(world_dir, AGENT_SAGA_LEASE_TTL=str(LEASE_TTL))
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(wal)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, **command: Any) -> dict[str, Any] | None:
        """The reply, or None when the process died answering."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert ready, f"the worker did not answer {command} within 120 s"
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            assert code == 137, f"the worker died with {code}, not by the injected kill:\n{self.stderr()}"
            return None
        reply: dict[str, Any] = json.loads(line)
        return reply

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no finally, no atexit, no flush
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


class EngineUnderFire(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="proving-stateful-"))
        self.wal = self.dir / "saga.wal"
        self.env_before = {k: os.environ.get(k) for k in ("RECOVERY_WORLD", "RECOVERY_ROLE", "RECOVERY_CRASH_EFFECT")}
        os.environ.update({"RECOVERY_WORLD": str(self.dir), "RECOVERY_ROLE": "daemon"})
        os.environ.pop("RECOVERY_CRASH_EFFECT", None)
        self.worker = Worker(self.wal, self.dir)
        self.sagas: dict[str, SagaModel] = {}
        self.counter = 0
        self.died_at = 0.0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def open_sagas(self) -> list[str]:
        return sorted(name for name, s in self.sagas.items() if s.status == "open")

    def died(self) -> None:
        """The worker is gone: its open sagas are dead; a new process takes over the agent's work."""
        for saga in self.sagas.values():
            if saga.status == "open":
                saga.status = "dead"
        self.died_at = time.monotonic()
        self.worker.close()
        self.worker = Worker(self.wal, self.dir)

    # -- rules ------------------------------------------------------------------------

    def pick(self, data: st.DataObject) -> SagaModel:
        """An open saga, or a new one while fewer than MAX_OPEN are open (so steps interleave)."""
        names = self.open_sagas()
        choices = [*names, ""] if len(names) < MAX_OPEN else names
        name = data.draw(st.sampled_from(choices), label="saga")
        if name:
            return self.sagas[name]
        name = self.fresh("s")
        reply = self.worker.send(op="open", saga=name)
        assert reply is not None
        self.sagas[name] = SagaModel(name, reply["saga_id"])
        return self.sagas[name]

    @rule(data=st.data(), kind=st.sampled_from(KINDS))
    def step(self, data: st.DataObject, kind: str) -> None:
        saga = self.pick(data)
        ref = self.fresh("r")
        saga.steps.append((kind, ref))
        reply = self.worker.send(op="step", saga=saga.name, kind=kind, ref=ref)
        assert reply is not None
        expected = {"charge_lost": "TimeoutError", "reserve_lost": "TimeoutError", "declined": "NotApplied"}
        assert reply.get("raised") == expected.get(kind)

    @precondition(lambda self: self.open_sagas())
    @rule(data=st.data(), how=st.sampled_from(ENDINGS))
    def end(self, data: st.DataObject, how: str) -> None:
        """One open saga ends: it commits, it fails and unwinds, or its process dies.

        A death is SIGKILL between two commands, or os._exit inside a tool call or an
        undo right after its effect landed; every saga the process held is then dead,
        and a fresh process carries on.
        """
        saga = self.sagas[data.draw(st.sampled_from(self.open_sagas()), label="saga")]
        charges = [ref for kind, ref in saga.steps if kind in ("charge", "charge_lost")]
        if how in ("commit", "fail"):
            reply = self.worker.send(op=how, saga=saga.name)
            assert reply is not None
            saga.status = "committed" if how == "commit" else "rolled_back"
            saga.report = reply.get("report")
            assert (saga.report is None) is (how == "commit")
            return
        if how == "die inside an undo" and charges:
            ref = data.draw(st.sampled_from(charges), label="ref")
            assert self.worker.send(op="die_in", effect=f"refund:{ref}:after") is not None
            assert self.worker.send(op="fail", saga=saga.name) is None  # died mid-rollback, refund landed
        elif how == "die inside a call":
            kind = data.draw(st.sampled_from(["charge", "charge_lost", "reserve", "notify"]), label="kind")
            ref = self.fresh("r")
            saga.steps.append((kind, ref))
            assert self.worker.send(op="die_in", effect=f"{FORWARD[kind]}:{ref}:after") is not None
            assert self.worker.send(op="step", saga=saga.name, kind=kind, ref=ref) is None  # effect landed
        else:  # between steps (also "inside an undo" of a saga that has no charge to refund)
            self.worker.kill()
        self.died()

    @precondition(lambda self: any(s.status == "dead" for s in self.sagas.values()))
    @rule()
    def recover(self) -> None:
        time.sleep(max(0.0, self.died_at + LEASE_TTL + 0.2 - time.monotonic()))  # dead leases run out
        with RecoveryDaemon(self.wal, lease_grace=0) as daemon:
            daemon.sweep()
        before = world.entries(self.dir)
        with RecoveryDaemon(self.wal, lease_grace=0) as again:
            second = again.sweep()
        assert not second.actions and world.entries(self.dir) == before, f"a second sweep acted: {second.actions}"
        for saga in self.sagas.values():
            if saga.status == "dead":
                saga.status = "recovered"

    def teardown(self) -> None:
        try:
            self.worker.close()
        finally:
            for key, value in self.env_before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- what the world must show ----------------------------------------------------------

    def applied(self) -> set[tuple[str, str]]:
        return {(e["op"], e["ref"]) for e in world.entries(self.dir) if e["ev"] == "applied"}

    def effects(self, saga: SagaModel, applied: set[tuple[str, str]]) -> list[tuple[int, str, str]]:
        """(step, kind, ref) of each step of ``saga`` whose forward effect is in the world."""
        return [(i, kind, ref) for i, (kind, ref) in enumerate(saga.steps, start=1)
                if (FORWARD[kind], ref) in applied]

    @staticmethod
    def undone(kind: str, ref: str, applied: set[tuple[str, str]]) -> bool:
        undo = UNDO[FORWARD[kind]]
        return undo is not None and (undo, ref) in applied

    @invariant()
    def nothing_happens_twice_and_the_daemon_never_acts_forward(self) -> None:
        items = world.entries(self.dir)
        twice = {k: n for k, n in world_counts(items, "applied").items() if n > 1}
        assert not twice, f"applied more than once: {twice}"
        assert not [e for e in items if e["role"] == "daemon" and e["op"] in ("charge", "reserve", "notify")]

    @invariant()
    def committed_and_live_sagas_keep_their_effects(self) -> None:
        applied = self.applied()
        for saga in self.sagas.values():
            if saga.status not in ("committed", "open"):
                continue
            for kind, ref in saga.steps:
                assert ((FORWARD[kind], ref) in applied) is (kind != "declined"), (saga.name, kind, ref)
                assert not self.undone(kind, ref, applied), f"{saga.status} saga {saga.name}: {kind} {ref} undone"

    @invariant()
    def a_report_says_what_the_world_shows(self) -> None:
        applied = self.applied()
        for saga in self.sagas.values():
            if saga.report is None:
                continue
            outcomes = {s["step"]: s["outcome"] for s in saga.report["steps"]}
            landed = self.effects(saga, applied)
            assert sorted(outcomes) == [i for i, _, _ in landed], (saga.name, outcomes, landed)
            for step, kind, ref in landed:
                assert (outcomes[step] == "compensated") is self.undone(kind, ref, applied), (saga.name, step, kind)
            standing = [(i, k) for i, k, r in landed if not self.undone(k, r, applied)]
            assert saga.report["clean"] is (not standing), (saga.name, saga.report, standing)

    @invariant()
    def after_recovery_every_effect_of_a_dead_saga_is_undone_or_escalated(self) -> None:
        applied = self.applied()
        queue = EscalationQueue(recovery_dir(self.wal) / "escalations.jsonl").all()
        escalated = {(e.saga, e.step) for e in queue}
        for saga in self.sagas.values():
            if saga.status != "recovered":
                continue
            for step, kind, ref in self.effects(saga, applied):
                assert self.undone(kind, ref, applied) or (saga.saga_id, step) in escalated, (
                    f"saga {saga.name} step {step} ({kind} {ref}) still stands and nobody was told")


EngineUnderFire.TestCase.settings = settings(
    max_examples=examples(12), stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEngineUnderFire = pytest.mark.slow(EngineUnderFire.TestCase)
