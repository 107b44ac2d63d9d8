"""One order of three steps, said once for both engines (issue 41, part 7).

usage: python three_steps.py embedded WAL          (the @durable run, in a process of its own)
       python three_steps.py temporal ADDRESS QUEUE  (a Temporal worker for the job, until killed)

The Temporal engine's shape is the one both share: an agent proposes the next step, the engine
runs it. ``propose`` is that agent (scripted by turn: reserve, charge, ship, then "done"). On
Temporal it is the worker's decision driver, and its answer is recorded as the ``decide``
activity; on the embedded engine the ``@durable`` entry point asks it through ``decide``, a
REVERSIBLE step, so its answer is recorded in the log. Either way the forward steps are the same
three functions (``@effect`` on Temporal, ``@tool`` here) with the same undo and the same
world: ``$AGENT_SAGA_KILLED_WORLD/effects.sqlite``, where each step notes its effect and each
turn of the agent notes that it was asked. A step's result is the object the world numbered for
it (``reserve-1``, ``charge-2``, ``ship-3``): a step run twice would shift every later number.
``$THREE_HOLD_AT_TURN=N``: the agent's N-th turn says ``deciding turn N`` and waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from agent_saga_temporal import Proposal, Situation, parse_manifest, saga_worker
from agent_saga_temporal.registry import Verdict, effect, invariant

from agent_saga import Compensation, FileWAL, compensator, durable, tool

# agent_saga.testing._killed, not the package: the package imports pytest into the worker
from agent_saga.testing._killed import World, hold

__all__ = ["DONE", "JOB", "ORDER", "SCRIPT", "ThreeStepAgent", "propose", "run_order"]

SCRIPT = ["reserve", "charge", "ship"]
DONE = "done"
ORDER = "order-7"

JOB = parse_manifest(f"""
version: 1
name: three-steps
goal: Reserve the stock, charge the card and ship the order.
facts: {{order_id: {ORDER}}}
steps:
  - {{name: reserve, semantics: COMPENSABLE, args: {{order_id: $facts.order_id}},
      undo: {{handler: three.undo, args: {{object_id: $result.id}}}}}}
  - {{name: charge, semantics: COMPENSABLE, after: [reserve], args: {{order_id: $facts.order_id}},
      undo: {{handler: three.undo, args: {{object_id: $result.id}}}}}}
  - {{name: ship, semantics: COMPENSABLE, after: [charge], args: {{order_id: $facts.order_id}},
      undo: {{handler: three.undo, args: {{object_id: $result.id}}}}}}
invariants: [order_placed]
finish: {DONE}
limits: {{max_turns: 6, step_timeout_seconds: 10, heartbeat_seconds: 5}}
""", source="three_steps.py")


def _effect(kind: str, order_id: str) -> dict[str, str]:
    world = World()
    number = sum(ev in SCRIPT for ev, _, _ in world.rows()) + 1  # the provider numbers what it creates
    world.note(kind, order_id)
    return {"id": f"{kind}-{number}", "order": order_id}


def reserve(order_id: str) -> dict[str, str]:
    return _effect("reserve", order_id)


def charge(order_id: str) -> dict[str, str]:
    return _effect("charge", order_id)


def ship(order_id: str) -> dict[str, str]:
    return _effect("ship", order_id)


FORWARD = {"reserve": reserve, "charge": charge, "ship": ship}
for _name, _fn in FORWARD.items():
    effect(_name)(_fn)


@compensator("three.undo")
def undo(object_id: str, idempotency_key: str = "") -> None:
    World().note("undo", object_id)


@invariant("order_placed")
def order_placed(facts: dict[str, Any], results: dict[str, Any]) -> Verdict:
    seen = World().rows()
    placed = all(sum(ev == kind and what == facts["order_id"] for ev, what, _ in seen) == 1 for kind in SCRIPT)
    return Verdict(placed, "each step's effect exists once" if placed else "a step's effect is missing or doubled")


def propose(turn: int) -> str:
    """The agent: the step to take at ``turn`` (from 1), then ``DONE``."""
    World().note("decide", f"turn {turn}")
    if os.environ.get("THREE_HOLD_AT_TURN") == str(turn):
        hold(f"deciding turn {turn}")
    return SCRIPT[turn - 1] if turn <= len(SCRIPT) else DONE


class ThreeStepAgent:
    """``propose`` as a Temporal decision driver: the proposed step with the arguments offered for it."""

    async def decide(self, situation: Situation) -> Proposal:
        choice = propose(situation.turn)
        offered = {o.choice: o for o in situation.options}
        args = dict(offered[choice].args) if choice in offered else {}
        return Proposal(choice, args, 1.0, "scripted")


# -- the embedded engine ------------------------------------------------------------------------

decide = tool(semantics="REVERSIBLE", name="decide")(propose)  # the agent's answer, recorded
STEPS = {
    name: tool(semantics="COMPENSABLE", name=name,
               compensate=lambda r: Compensation(handler="three.undo", kwargs={"object_id": r["id"]}))(fn)
    for name, fn in FORWARD.items()
}


@durable("three.order")
def run_order(order_id: str) -> dict[str, Any]:
    """The agent proposes, the run takes each step, until it says it is done; the steps' results by name."""
    results: dict[str, Any] = {}
    turn = 1
    while (choice := decide(turn)) != DONE:
        results[choice] = STEPS[choice](order_id)
        turn += 1
    return results


# -- the processes --------------------------------------------------------------------------------

async def _work(address: str, queue: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    async with saga_worker(client, driver=ThreeStepAgent(), task_queue=queue):
        await asyncio.Event().wait()  # until killed


def main(argv: list[str]) -> None:
    if argv[0] == "embedded":
        wal = FileWAL(argv[1])
        try:
            run_order(ORDER, saga_id=ORDER, wal=wal)
        finally:
            wal.close()
    else:
        asyncio.run(_work(argv[1], argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
