"""A long-lived agent process for the stateful test: sagas driven one command at a time.

usage: python proving_worker.py WAL   (env as recovery_checks.env_for sets it)

Reads one JSON command per line on stdin and answers one JSON line on stdout:

    {"op": "open", "saga": "s1"}                  open a saga_scope (several may be open)
    {"op": "step", "saga": "s1", "kind": K, "ref": "r7"}
    {"op": "fail", "saga": "s1"}                  the agent gives up: unwind, answer the report
    {"op": "commit", "saga": "s1"}
    {"op": "die_in", "effect": "refund:r7:after"} the next such effect call kills this process

The effects are recovery_world's (a file ledger shared with the test). A kill is
os._exit inside an effect (die_in) or SIGKILL from the test between commands.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import recovery_world as world

from agent_saga import ActionSemantics, FileWAL, NotApplied, SagaAborted, call_with, delete_by, saga_scope

C, IRR = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE


def lost(effect: Any) -> Any:
    """The effect lands, and its answer never arrives (the step is UNKNOWN)."""

    def call(idempotency_key: str | None = None) -> None:
        effect(idempotency_key=idempotency_key)
        raise TimeoutError("the answer was lost")

    return call


def declined(idempotency_key: str | None = None) -> None:
    raise NotApplied("declined before anything happened")


def step(saga: Any, kind: str, ref: str) -> None:
    charge = functools.partial(world.charge, ref=ref, amount=1)
    reserve = functools.partial(world.reserve, item=ref)
    refund = call_with(world.refund, ref=ref)  # known before the call
    release = delete_by(world.release, field="id")  # needs the result
    if kind == "charge":
        saga.execute(tool="world.charge", semantics=C, forward=charge, compensate=refund)
    elif kind == "reserve":
        saga.execute(tool="world.reserve", semantics=C, forward=reserve, compensate=release)
    elif kind == "notify":
        saga.execute(tool="world.notify", semantics=IRR, forward=functools.partial(world.notify, to=ref))
    elif kind == "charge_lost":
        saga.execute(tool="world.charge", semantics=C, forward=lost(charge), compensate=refund)
    elif kind == "reserve_lost":
        saga.execute(tool="world.reserve", semantics=C, forward=lost(reserve), compensate=release)
    elif kind == "declined":
        saga.execute(tool="world.charge", semantics=C, forward=declined, compensate=refund)
    else:
        raise ValueError(f"unknown step kind {kind!r}")


def main() -> None:
    wal = FileWAL(sys.argv[1])
    scopes: dict[str, saga_scope] = {}
    sagas: dict[str, Any] = {}
    for line in sys.stdin:
        command = json.loads(line)
        op, name = command["op"], command.get("saga", "")
        reply: dict[str, Any] = {"ok": True}
        if op == "open":
            scopes[name] = saga_scope(wal, name=name)
            sagas[name] = scopes[name].__enter__()
            reply["saga_id"] = sagas[name].saga_id
        elif op == "step":
            try:
                step(sagas[name], command["kind"], command["ref"])
            except (TimeoutError, NotApplied) as err:
                reply["raised"] = type(err).__name__  # the agent notes it and carries on
        elif op == "fail":
            try:
                scopes.pop(name).__exit__(RuntimeError, RuntimeError("the agent gives up"), None)
            except SagaAborted as aborted:
                reply["report"] = aborted.report.to_dict()
        elif op == "commit":
            scopes.pop(name).__exit__(None, None, None)
        elif op == "die_in":
            os.environ["RECOVERY_CRASH_EFFECT"] = command["effect"]
        else:
            raise ValueError(f"unknown command {op!r}")
        print(json.dumps(reply), flush=True)
    wal.close()


if __name__ == "__main__":
    main()
