"""A small onboarding world for the proving tests: a CRM, a card processor, a plan store.

The state lives in memory and each effect is idempotent the way real APIs are
(creating what exists, or deleting what is gone, changes nothing), so that an
undo known before the call is safe to run whether or not its step landed.
``refund_that_lies`` is the defect prove_rollback exists to catch: it reports
success and leaves the charge in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_saga import ActionSemantics, call_with, compensator

C = ActionSemantics.COMPENSABLE


class World:
    def __init__(self) -> None:
        self.contacts: list[str] = []
        self.charges: list[str] = []
        self.plans: list[str] = []
        self.emails: list[str] = []
        self.calls: list[str] = []  # every forward call and undo, in order

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def snapshot(self) -> dict[str, list[str]]:
        # The live lists, on purpose: prove_rollback must copy what it is given.
        return {"contacts": self.contacts, "charges": self.charges, "plans": self.plans}

    def add(self, kind: str, item: str) -> None:
        self.calls.append(f"{kind}+{item}")
        items = getattr(self, kind)
        if item not in items:
            items.append(item)

    def remove(self, kind: str, item: str) -> None:
        self.calls.append(f"{kind}-{item}")
        items = getattr(self, kind)
        if item in items:
            items.remove(item)


WORLD = World()


def create_contact(email: str) -> dict[str, str]:
    WORLD.add("contacts", email)
    return {"email": email}


@compensator("proving.crm.delete_contact")
def delete_contact(email: str) -> None:
    WORLD.remove("contacts", email)


def charge(ref: str) -> dict[str, str]:
    WORLD.add("charges", ref)
    return {"id": ref}


@compensator("proving.billing.refund")
def refund(ref: str) -> None:
    WORLD.remove("charges", ref)


@compensator("proving.billing.refund_that_lies")
def refund_that_lies(ref: str) -> None:
    WORLD.calls.append(f"charges~{ref}")  # answers 200 OK, refunds nothing


async def activate_plan(plan: str) -> dict[str, str]:
    WORLD.add("plans", plan)
    return {"plan": plan}


@compensator("proving.plans.deactivate")
async def deactivate_plan(plan: str) -> None:
    WORLD.remove("plans", plan)


def send_welcome(to: str) -> None:
    WORLD.emails.append(to)


def onboarding(undo_charge: Callable[..., Any] = refund) -> Callable[[Any], Any]:
    """Three steps through the awaiting face: contact, charge, plan."""

    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics=C,
                           forward=lambda: create_contact("ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        await saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                           compensate=call_with(undo_charge, ref="ch_1"))
        await saga.execute(tool="plans.activate", semantics=C, forward=lambda: activate_plan("pro"),
                           compensate=call_with(deactivate_plan, plan="pro"))

    return scenario


def onboarding_sync(undo_charge: Callable[..., Any] = refund) -> Callable[[Any], None]:
    """The same three steps through the blocking face (``with saga_scope()``)."""

    def scenario(saga: Any) -> None:
        saga.execute(tool="crm.create_contact", semantics=C,
                     forward=lambda: create_contact("ada@example.com"),
                     compensate=call_with(delete_contact, email="ada@example.com"))
        saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                     compensate=call_with(undo_charge, ref="ch_1"))
        saga.execute(tool="plans.activate", semantics=C, forward=lambda: activate_plan("pro"),
                     compensate=call_with(deactivate_plan, plan="pro"))

    return scenario
