"""``agent-saga demo``: three acts on the real engine, offline, in a few seconds.

I.   A transaction across three simulated systems fails on its fourth step and
     is unwound newest-first.
II.  The pre-flight gate refuses an irreversible wire before it happens, and a
     budget stops a runaway loop of charges (which are then refunded).
III. A worker process is killed right after its charge landed; the recovery
     daemon waits for the dead worker's lease to expire and refunds it, once.

The log is ``agent-saga.wal`` in ``--dir`` (default: the current directory), the
library's default log, so every verb reads it with no option and the commands the
demo prints last (``agent-saga graph --wal ./agent-saga.wal``, ...) run as printed.
The simulated world is a JSON-lines file of effects (``agent-saga-demo.world.jsonl``) that
honours idempotency keys the way a payment provider does, so "refunded exactly
once" is checked against the world, not against the engine's opinion of it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_USAGE, CliError
from agent_saga.cli.options import add_verb
from agent_saga.log.resolve import DEFAULT_LOG_FILE

__all__ = ["World", "register", "run_demo", "worker_main"]

WORLD_FILE = "agent-saga-demo.world.jsonl"
# The library's default log (agent_saga.log.resolve): `agent-saga graph`, `verify`, `ui` ...
# find the demo's log with no option, and the seed's `graph --wal ./agent-saga.wal` works.
LOG_FILE = DEFAULT_LOG_FILE
WORKER_LEASE_TTL = 1.0  # seconds: short, so the audience does not wait


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "demo", run_demo, raw=False,
        examples="example: agent-saga demo --no-color --dir /tmp/saga-demo",
    )
    p.add_argument("--dir", default=".",
                   help="where the demo writes its log and its simulated world (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help=f"overwrite the demo's files ({LOG_FILE}, {WORLD_FILE}, {LOG_FILE}.recovery/) "
                        "if --dir already holds them")
    p.add_argument("--no-color", action="store_true", help="plain text (also: NO_COLOR, or a non-TTY stdout)")
    p.add_argument("--logs", action="store_true", help="also print the log records each act wrote")


class World:
    """The outside systems, as an append-only file that several processes share.

    Like a payment provider, it applies an operation once per idempotency key:
    a repeated key is recorded as an attempt but changes nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _apply(self, kind: str, target: str, key: str | None, **extra: Any) -> bool:
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            seen = {json.loads(line).get("key") for line in fh if line.strip()}
            applied = key is None or key not in seen
            fh.write(json.dumps({"op": kind, "target": target, "key": key, "applied": applied, **extra}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return applied

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(x) for x in self.path.read_text(encoding="utf-8").splitlines() if x.strip()]

    def standing(self) -> list[str]:
        """What exists now: created and not undone (counting only applied operations)."""
        alive: dict[str, bool] = {}
        for e in self.events():
            if e["applied"]:
                alive[e["target"]] = e["op"] == "create"
        return [target for target, up in alive.items() if up]

    def create(self, target: str, key: str | None = None, **extra: Any) -> dict[str, str]:
        self._apply("create", target, key, **extra)
        return {"id": target}

    def undo(self, target: str, key: str | None = None) -> None:
        self._apply("undo", target, key)


def _world() -> World:
    return World(Path(os.environ["AGENT_SAGA_DEMO_WORLD"]))


def _register_handlers() -> None:
    """The named undos, importable by any process (the daemon runs them after a crash)."""
    from agent_saga import compensator
    from agent_saga.registry import registered

    if registered("demo.undo"):
        return

    @compensator("demo.undo")
    def undo(target: str, idempotency_key: str | None = None) -> None:
        _world().undo(target, idempotency_key)


class _Out:
    def __init__(self, color: bool) -> None:
        self.color = color

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def act(self, title: str) -> None:
        print()
        print(self.paint(title, "1"))

    def say(self, text: str, code: str = "") -> None:
        print(f"  {self.paint(text, code) if code else text}")


def _undo_of(r: dict[str, str]) -> Any:
    from agent_saga import Compensation

    return Compensation(handler="demo.undo", kwargs={"target": r["id"]})


def _show_log(out: _Out, wal_path: Path, saga_ids: set[str]) -> None:
    from agent_saga.log import read_records

    tools: dict[tuple[str, int], str] = {}
    for rec in read_records(wal_path):
        if rec["saga"] in saga_ids:
            body = rec.get("body", {})
            if "tool" in body and "step" in rec:
                tools[rec["saga"], rec["step"]] = body["tool"]
            what = tools.get((rec["saga"], rec.get("step", 0)), "") or body.get("cause") or ""
            step = f" step {rec['step']}" if "step" in rec else ""
            out.say(out.paint(f"[log] #{rec['seq']:<4} {rec['type']:<20}{step} {what}", "2"))


def act_one(out: _Out, wal: Any, world: World) -> str:
    from agent_saga import ActionSemantics, NotApplied, SagaAborted, saga_scope

    out.act("Act I - one transaction across three systems fails on its fourth step")
    C = ActionSemantics.COMPENSABLE  # noqa: N806 - the seed's spelling

    def step(tool: str, target: str) -> Callable[[str], dict[str, str]]:
        def forward(idempotency_key: str) -> dict[str, str]:
            out.say(f"-> {tool:<26} {target}")
            return world.create(target, idempotency_key)
        return forward

    def invent_region() -> None:
        # The API rejected the call, so nothing changed: NotApplied says so. Any
        # other error would leave the step UNKNOWN (it might have landed).
        raise NotApplied("region 'eu-cantral-1' does not exist (the model made it up)")

    scope = saga_scope(wal, name="onboard-acme")
    try:
        with scope as s:
            s.execute(tool="aws.run_instances", semantics=C, forward=step("aws.run_instances", "instance i-0abc"),
                      compensate=_undo_of)
            s.execute(tool="pinecone.create_namespace", semantics=C,
                      forward=step("pinecone.create_namespace", "namespace acme"), compensate=_undo_of)
            s.execute(tool="jira.create_issue", semantics=C, forward=step("jira.create_issue", "ticket ONB-7"),
                      compensate=_undo_of)
            s.execute(tool="aws.configure_region", semantics=C, forward=invent_region, compensate=_undo_of)
    except SagaAborted as aborted:
        out.say(f"!! {aborted.cause}", "31")
        for line in aborted.report.format_text().splitlines():
            out.say(line, "32" if aborted.report.clean else "31")
    assert scope.saga is not None
    return scope.saga.saga_id


def act_two(out: _Out, wal: Any, world: World) -> set[str]:
    from agent_saga import BudgetLimit, PreFlightGate, SagaAborted, StepRefused, saga_scope

    out.act("Act II - the gate refuses what cannot be undone, and a budget stops a runaway loop")
    gate = PreFlightGate(limits=[BudgetLimit("daily-spend", arg="amount", max_total=5_000, window=86_400)])
    ids: set[str] = set()

    scope = saga_scope(wal, name="pay-supplier", gate=gate)
    try:
        with scope as s:
            s.execute(tool="bank.wire", semantics="IRREVERSIBLE", args={"amount": 2_000, "to": "acct_9"},
                      forward=lambda: world.create("wire $2000 to acct_9"))
    except SagaAborted as aborted:
        refused = aborted.cause
        out.say(f"x  bank.wire refused before it ran: {getattr(refused, 'reason', refused)}", "33")
    assert scope.saga is not None
    ids.add(scope.saga.saga_id)

    scope = saga_scope(wal, name="runaway-agent", gate=gate)
    try:
        with scope as s:
            for n in range(1, 100):  # the agent "decides" to charge again and again
                s.execute(tool="stripe.charge", semantics="COMPENSABLE", args={"amount": 999},
                          forward=lambda n=n: world.create(f"charge #{n} $999"), compensate=_undo_of)
                out.say(f"-> stripe.charge              charge #{n} $999")
    except SagaAborted as aborted:
        if isinstance(aborted.cause, StepRefused):
            out.say(f"x  charge #{len(aborted.report.steps) + 1} refused: {aborted.cause.reason}", "33")
        report = aborted.report
        out.say(f"<- {len(report.compensated)} charges refunded, newest first; rollback "
                f"{'clean' if report.clean else 'NOT clean'}", "32" if report.clean else "31")
    assert scope.saga is not None
    ids.add(scope.saga.saga_id)
    return ids


WORKER_CHARGE = "charge $4200 (worker)"


def worker_main(directory: str) -> None:
    """Act III's worker: the charge lands, and the process dies inside the call.

    Its undo was declared with ``call_with`` (known before the call), so it went
    to disk with the intent: the daemon can finish the unwind although the
    worker never got to record how its call ended.
    """
    from agent_saga import FileWAL, call_with, saga_scope
    from agent_saga.registry import resolve

    os.environ["AGENT_SAGA_DEMO_WORLD"] = str(Path(directory) / WORLD_FILE)
    _register_handlers()
    world = _world()
    wal = FileWAL(Path(directory) / LOG_FILE)

    def charge_then_die(idempotency_key: str) -> None:
        world.create(WORKER_CHARGE, idempotency_key)
        os._exit(9)  # killed mid-call: no finally, no atexit, no rollback in this process

    with saga_scope(wal, name="checkout-worker") as s:
        print(s.saga_id, flush=True)
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", args={"amount": 4200},
                  forward=charge_then_die, compensate=call_with(resolve("demo.undo"), target=WORKER_CHARGE))


def act_three(out: _Out, directory: Path, world: World) -> tuple[str, bool]:
    from agent_saga.recovery import RecoveryDaemon

    out.act("Act III - a worker is killed mid-saga; the recovery daemon finishes the unwind")
    env = dict(os.environ, AGENT_SAGA_LEASE_TTL=str(WORKER_LEASE_TTL))
    code = "import sys; from agent_saga.cli.demo import worker_main; worker_main(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, str(directory)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    saga_id = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else "?"
    out.say(f"-> worker's charge landed, then the worker was killed inside the call (exit {proc.returncode})")
    out.say(f"   standing in the world: {', '.join(world.standing()) or 'nothing'}")
    daemon = RecoveryDaemon(directory / LOG_FILE, lease_grace=0.2, retry_delay=0.1)
    try:
        deadline = time.monotonic() + 30
        waited = False
        while time.monotonic() < deadline:
            report = daemon.sweep()
            if saga_id in report.recovered:
                break
            if saga_id in report.live and not waited:
                out.say("   daemon: the worker's lease has not expired yet - waiting (a PID would lie)")
                waited = True
            time.sleep(0.2)
        for _ in range(3):  # the daemon runs again, as cron would: nothing more happens
            daemon.sweep()
    finally:
        daemon.close()
    refunds = [e for e in world.events() if e["op"] == "undo" and e["target"] == WORKER_CHARGE]
    applied = sum(e["applied"] for e in refunds)
    ok = applied == 1 and WORKER_CHARGE not in world.standing()
    out.say(f"<- daemon refunded the charge: {applied} refund applied, {len(refunds)} attempt(s) "
            "in 4 sweeps", "32" if ok else "31")
    return saga_id, ok


def _clear(directory: Path, *, force: bool) -> None:
    """Make room for the demo's files, replacing none that the user did not say to replace.

    The directory may hold a user's own log under the demo's names: without ``--force``
    the demo refuses before it writes anything.
    """
    from agent_saga.recovery.lease import recovery_dir

    paths = (directory / LOG_FILE, directory / WORLD_FILE, recovery_dir(directory / LOG_FILE))
    found = [path for path in paths if path.exists() or path.is_symlink()]
    if found and not force:
        raise CliError(f"{directory} already holds {', '.join(path.name for path in found)} (an earlier demo's "
                       "or yours): pass --force to overwrite, or --dir to use another directory", EXIT_USAGE)
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _lock(directory: Path) -> int:
    """Hold the directory for this run: a second demo there (``--force`` or not) stops at one line.

    Two demos in one directory would rewrite each other's log and world mid-run; the
    lock is an ``flock`` on the directory itself, so no file is left behind and the
    kernel releases it when this process ends, however it ends.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CliError(f"another agent-saga demo is running in {directory}: wait for it to finish, "
                       "or pass --dir to use another directory", EXIT_USAGE) from None
    return fd


def run_demo(args: argparse.Namespace) -> int:
    """Three acts on the real engine: a multi-system transaction unwound newest-first; the gate refusing
    what cannot be undone and a budget stopping a runaway loop; a worker killed mid-saga and the
    recovery daemon finishing its unwind exactly once.
    """
    out = _Out(not (args.no_color or os.environ.get("NO_COLOR") or not sys.stdout.isatty()))
    directory = Path(args.dir).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    held = _lock(directory)
    try:
        return _run(args, out, directory)
    finally:
        os.close(held)


def _run(args: argparse.Namespace, out: _Out, directory: Path) -> int:
    from agent_saga import FileWAL

    _clear(directory, force=args.force)
    os.environ["AGENT_SAGA_DEMO_WORLD"] = str(directory / WORLD_FILE)
    _register_handlers()
    world = _world()
    wal_path = directory / LOG_FILE

    wal = FileWAL(wal_path)
    try:
        first = act_one(out, wal, world)
        if args.logs:
            wal.barrier()
            _show_log(out, wal_path, {first})
        second = act_two(out, wal, world)
        if args.logs:
            wal.barrier()
            _show_log(out, wal_path, second)
    finally:
        wal.close()
    third, ok = act_three(out, directory, world)
    if args.logs:
        _show_log(out, wal_path, {third})

    print()
    left = world.standing()
    out.say(f"world afterwards: {', '.join(left) if left else 'nothing left standing'}",
            "32" if not left and ok else "31")
    out.say(f"the log of all three acts: {wal_path}")
    out.say("next (each runs as printed, from this directory):")
    for command in next_commands(wal_path, first):
        out.say(f"  {command}")
    return EXIT_OK if ok and not left else EXIT_FINDING


def next_commands(wal_path: Path, act_one: str) -> list[str]:
    """The commands the demo suggests last, naming its log as the shell here can reach it."""
    import shlex

    try:
        relative = wal_path.relative_to(Path.cwd())
        shown = f"./{relative}" if relative.parent == Path(".") else str(relative)
    except ValueError:
        shown = str(wal_path)
    log = shlex.quote(shown)
    return [
        f"agent-saga verify --wal {log}                    # the hash chain is intact",
        f"agent-saga certify --wal {log}                   # every effect is accounted for",
        f"agent-saga graph --wal {log}                     # the rollback forks, as Mermaid",
        f"agent-saga animate --wal {log} --saga {act_one[:8]} -o rollback.svg   # Act I, animated",
    ]
