"""Optimistic vs transactional, side by side: the same agent, the same failures, one kill -9.

    python examples/chaos_demo.py

One agent works three orders; each order charges a card, creates a server and opens a
ticket in a fake world (a JSON-lines file of effects that several processes share). The
same faults are injected into both runs:

* order-1: nothing goes wrong;
* order-2: the server is created but its answer is lost (the call raises a timeout);
* order-3: the agent process is killed with SIGKILL (a real ``kill -9`` from this
  script) after the charge and the server landed.

The *optimistic* run is the usual code: call the tools, keep an undo list in memory,
and unwind it in ``except``. The *transactional* run is the same agent with each order
in a saga: undos declared before the call, the intent of each step fsync'd to the log
before its effect. After the kill, the recovery daemon (run here, in this process) waits
for the dead agent's lease to expire and finishes the unwind from the log.

It prints what each run left behind. Offline, a few seconds; it writes ``chaos_demo/``
in the current directory (replaced on each run).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from agent_saga import ActionSemantics, FileWAL, SagaAborted, call_with, compensator, saga_scope
from agent_saga.recovery import RecoveryDaemon

ORDERS = ("order-1", "order-2", "order-3")
ANSWER_LOST = "order-2"  # the server lands, its answer does not
KILLED = "order-3"  # the agent is killed with SIGKILL once the charge and the server landed
LEASE_TTL = 1.0  # seconds: a short lease, so the daemon's wait is short too
WORLD_ENV = "CHAOS_DEMO_WORLD"


class World:
    """The outside systems: an append-only file of effects, shared by every process.

    Like a payment provider, an operation is applied once per idempotency key.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _apply(self, op: str, target: str, key: str | None) -> None:
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            seen = {json.loads(line)["key"] for line in fh if line.strip()}
            applied = key is None or key not in seen
            fh.write(json.dumps({"op": op, "target": target, "key": key, "applied": applied}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def create(self, target: str, key: str | None = None) -> dict[str, str]:
        self._apply("create", target, key)
        return {"id": target}

    def undo(self, target: str, key: str | None = None) -> None:
        self._apply("undo", target, key)

    def standing(self) -> list[str]:
        alive: dict[str, bool] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if event["applied"]:
                    alive[event["target"]] = event["op"] == "create"
        return [target for target, up in alive.items() if up]


def world() -> World:
    return World(Path(os.environ[WORLD_ENV]))


@compensator("chaos.undo")  # by name: the recovery daemon runs it in another process
def undo(target: str, idempotency_key: str | None = None) -> None:
    world().undo(target, idempotency_key)


# -- the tools, with the faults injected the same way in both runs ------------------------

def charge(order: str, idempotency_key: str | None = None) -> dict[str, str]:
    return world().create(f"charge {order}", idempotency_key)


def create_server(order: str, idempotency_key: str | None = None) -> dict[str, str]:
    result = world().create(f"server {order}", idempotency_key)
    if order == ANSWER_LOST:
        raise TimeoutError("read timeout: the server was created, the answer was lost")
    return result


def open_ticket(order: str, idempotency_key: str | None = None) -> dict[str, str]:
    if order == KILLED:
        print("KILL-ME", flush=True)  # the parent sends SIGKILL now
        time.sleep(60)
    return world().create(f"ticket {order}", idempotency_key)


#: (tool name, function, what it creates: the target of its undo, known before the call)
TOOLS: list[tuple[str, Callable[..., dict[str, str]], str]] = [
    ("payments.charge", charge, "charge"),
    ("cloud.create_server", create_server, "server"),
    ("tickets.open", open_ticket, "ticket"),
]


# -- the agent, twice ---------------------------------------------------------------------

def optimistic(order: str) -> None:
    """Call the tools; keep the undos in memory; unwind them in ``except``."""
    undos: list[Callable[[], None]] = []
    try:
        for _, tool, _ in TOOLS:
            result = tool(order)
            undos.append(lambda target=result["id"]: world().undo(target))
    except Exception:
        for undo_one in reversed(undos):
            undo_one()
        raise


def transactional(order: str, log: Path) -> None:
    """The same calls as steps of one saga; each undo is declared before its call."""
    with saga_scope(FileWAL(log), name=order) as saga:
        for name, tool, creates in TOOLS:
            saga.execute(tool=name, semantics=ActionSemantics.COMPENSABLE, args={"order": order},
                         forward=partial(tool, order),  # the engine fills idempotency_key
                         compensate=call_with(undo, target=f"{creates} {order}"))


def agent_main(mode: str, directory: Path) -> None:
    """The child process: work every order, say how each ended."""
    for order in ORDERS:
        try:
            if mode == "optimistic":
                optimistic(order)
            else:
                transactional(order, directory / "agent-saga.wal")
            print(f"completed {order}", flush=True)
        except (SagaAborted, TimeoutError) as err:
            print(f"failed {order}: {type(err).__name__}", flush=True)


# -- the harness --------------------------------------------------------------------------

def run(mode: str, directory: Path) -> tuple[list[str], list[str]]:
    """Run the agent in a child process, kill it with SIGKILL when it asks; (completed orders, its lines)."""
    directory.mkdir(parents=True)
    env = dict(os.environ, **{WORLD_ENV: str(directory / "world.jsonl")}, AGENT_SAGA_LEASE_TTL=str(LEASE_TTL))
    child = subprocess.Popen([sys.executable, __file__, "--agent", mode, str(directory)], env=env,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines: list[str] = []
    for line in child.stdout:
        if line.strip() == "KILL-ME":
            os.kill(child.pid, signal.SIGKILL)
            lines.append(f"killed with SIGKILL during {KILLED}")
            break
        lines.append(line.strip())
    child.wait(timeout=30)
    return [line.split()[1] for line in lines if line.startswith("completed")], lines


def recover(log: Path) -> tuple[int, list[str]]:
    """Sweep until the killed agent's saga is unwound (its lease must expire first).

    Returns how many sweeps ran and what the last one did.
    """
    sweeps = 0
    with RecoveryDaemon(log, lease_grace=0.0) as daemon:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            sweeps += 1
            report = daemon.sweep()
            if report.recovered:
                return sweeps, [action.line() for action in report.actions]
            time.sleep(0.25)
    return sweeps, ["nothing recovered within 20 s"]


def main() -> int:
    root = Path("chaos_demo").absolute()
    shutil.rmtree(root, ignore_errors=True)
    left: dict[str, list[str]] = {}
    for mode in ("optimistic", "transactional"):
        directory = root / mode
        completed, lines = run(mode, directory)
        os.environ[WORLD_ENV] = str(directory / "world.jsonl")
        print(f"{mode}:")
        for line in lines:
            print(f"  {line}")
        if mode == "transactional":
            sweeps, did = recover(directory / "agent-saga.wal")
            print(f"  recovery daemon: {sweeps} sweep(s) (the first ones wait for the dead agent's lease to expire)")
            for line in did:
                print(f"    {line}")
        standing = World(directory / "world.jsonl").standing()
        left[mode] = [t for t in standing if t.split()[-1] not in completed]  # effects of orders that did not complete
        print(f"  standing in the world: {', '.join(standing) or 'nothing'}")
        print()
    print("left behind by orders that did not complete (orphans):")
    for mode, orphans in left.items():
        print(f"  {mode:<14} {len(orphans)}: {', '.join(orphans) or 'none'}")
    print(f"the transactional run's log: {root / 'transactional' / 'agent-saga.wal'}")
    return 0 if left["optimistic"] and not left["transactional"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--agent"]:
        agent_main(sys.argv[2], Path(sys.argv[3]))
    else:
        raise SystemExit(main())
