"""Prove that an onboarding workflow unwinds cleanly from a failure at any step.

    python examples/prove_rollback.py

Three steps (create a CRM contact, charge a card, activate a plan), each with an
undo known before the call. prove_rollback runs the workflow once per step and
failure mode and compares the world after each rollback with the world before.
The first proof holds. The second uses a refund that answers "ok" and refunds
nothing: the engine's report says clean, the world still holds the charge, and
the proof names the step whose undo lied and what it left behind. Offline; the
"world" is three lists in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent_saga import call_with, compensator
from agent_saga.proving import prove_rollback

world: dict[str, list[str]] = {"contacts": [], "charges": [], "plans": []}


def snapshot() -> dict[str, list[str]]:
    return world


def reset() -> None:
    for items in world.values():
        items.clear()


def add(kind: str, item: str) -> dict[str, str]:
    if item not in world[kind]:
        world[kind].append(item)
    return {"id": item}


def remove(kind: str, item: str) -> None:
    if item in world[kind]:
        world[kind].remove(item)


@compensator("example.crm.delete_contact")
def delete_contact(email: str) -> None:
    remove("contacts", email)


@compensator("example.billing.refund")
def refund(charge_id: str) -> None:
    remove("charges", charge_id)


@compensator("example.billing.refund_that_lies")
def refund_that_lies(charge_id: str) -> None:
    return None  # "200 OK", and the money stays taken


@compensator("example.plans.deactivate")
def deactivate(plan: str) -> None:
    remove("plans", plan)


def onboarding(undo_charge: Callable[..., Any]) -> Callable[[Any], Any]:
    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics="COMPENSABLE",
                           forward=lambda: add("contacts", "ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        await saga.execute(tool="billing.charge", semantics="COMPENSABLE",
                           forward=lambda: add("charges", "ch_1"),
                           compensate=call_with(undo_charge, charge_id="ch_1"))
        await saga.execute(tool="plans.activate", semantics="COMPENSABLE",
                           forward=lambda: add("plans", "pro"),
                           compensate=call_with(deactivate, plan="pro"))

    return scenario


async def main() -> None:
    honest = await prove_rollback(onboarding(refund), snapshot=snapshot, reset=reset)
    print(honest.format_text())
    print()
    lying = await prove_rollback(onboarding(refund_that_lies), snapshot=snapshot, reset=reset)
    print(lying.format_text())
    assert honest.proven
    assert not lying.proven


if __name__ == "__main__":
    asyncio.run(main())
