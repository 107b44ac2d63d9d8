"""The checkout's effects, undos, reconcilers and invariants, all against the simulated provider.

Importing this module registers them; a worker that runs the checkout imports it.
Forward effects pass the step's idempotency key to the provider; every reconciler
asks the provider itself (by key for a forward step, by object for an undo).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agent_saga import NotApplied, Observation, compensator, reconciler
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.registry import Verdict, effect, invariant

__all__ = ["CRASH_AT", "STATE", "provider"]

#: Where the demo keeps its provider file and its dev server's database.
STATE = "AGENT_SAGA_TEMPORAL_STATE"
#: The crash drill: the worker process dies right after this step's effect.
CRASH_AT = "AGENT_SAGA_TEMPORAL_CRASH_AT"


def state_dir() -> Path:
    return Path(os.environ.get(STATE) or "agent-saga-temporal-demo").absolute()


def provider() -> Provider:
    return Provider(state_dir() / "provider.json")


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_AT) == step:
        # No cleanup, no reply: the provider has the change, Temporal has no answer.
        os._exit(70)


# -- forward effects ----------------------------------------------------------------------


@effect("reserve_inventory")
def reserve_inventory(order_id: str, sku: str, quantity: int, idempotency_key: str) -> dict[str, Any]:
    result = provider().reserve(order_id, sku, quantity, idempotency_key)
    _crash_point("reserve_inventory")
    return result


@effect("charge_payment")
def charge_payment(order_id: str, amount_cents: int, customer: str, idempotency_key: str) -> dict[str, Any]:
    if amount_cents <= 0:
        raise NotApplied(f"refusing to charge {amount_cents} cents")
    result = provider().charge(order_id, amount_cents, customer, idempotency_key)
    _crash_point("charge_payment")
    return result


@effect("schedule_fulfillment")
def schedule_fulfillment(order_id: str, address: str, idempotency_key: str) -> dict[str, Any]:
    result = provider().schedule(order_id, address, idempotency_key)
    _crash_point("schedule_fulfillment")
    return result


# -- undos ----------------------------------------------------------------------------------


@compensator("release_inventory")
def release_inventory(reservation_id: str, idempotency_key: str | None = None) -> None:
    provider().release(reservation_id, idempotency_key or "")


@compensator("refund_payment")
def refund_payment(charge_id: str, amount_cents: int, idempotency_key: str | None = None) -> None:
    provider().refund(charge_id, amount_cents, idempotency_key or "")


@compensator("cancel_fulfillment")
def cancel_fulfillment(shipment_id: str, idempotency_key: str | None = None) -> None:
    provider().cancel(shipment_id, idempotency_key or "")


# -- reconcilers: did the forward effect land (by key)? is the undo in effect? -------------------


def _landed(kind: str, key: str, result: Any) -> Observation:
    found = provider().find(kind, key)
    if found is None:
        return Observation(exists=False, detail=f"no {kind} under key {key}")
    return Observation(exists=True, detail=f"{kind} {found['id']} exists under key {key}", result=result(found))


@reconciler("reserve_inventory")
def reserve_landed(order_id: str, sku: str, quantity: int, idempotency_key: str) -> Observation:
    return _landed("reservation", idempotency_key, lambda o: {"reservation_id": o["id"]})


@reconciler("charge_payment")
def charge_landed(order_id: str, amount_cents: int, customer: str, idempotency_key: str) -> Observation:
    return _landed("charge", idempotency_key, lambda o: {"charge_id": o["id"], "amount_cents": o["amount_cents"]})


@reconciler("schedule_fulfillment")
def shipment_landed(order_id: str, address: str, idempotency_key: str) -> Observation:
    return _landed("shipment", idempotency_key, lambda o: {"shipment_id": o["id"], "status": "accepted"})


def _undone(object_id: str, check: Any, what: str) -> Observation:
    found = provider().get(object_id)
    if found is None:
        return Observation(exists=False, reversed_=None, detail=f"the provider has no {object_id}")
    done = bool(check(found))
    return Observation(exists=True, reversed_=done, detail=f"{object_id} {what if done else 'not ' + what}")


@reconciler("release_inventory")
def release_checked(reservation_id: str) -> Observation:
    return _undone(reservation_id, lambda o: o["status"] == "released", "released")


@reconciler("refund_payment")
def refund_checked(charge_id: str, amount_cents: int) -> Observation:
    return _undone(charge_id, lambda o: o["refunded_cents"] >= amount_cents, f"refunded {amount_cents} cents")


@reconciler("cancel_fulfillment")
def cancel_checked(shipment_id: str) -> Observation:
    return _undone(shipment_id, lambda o: o["status"] == "cancelled", "cancelled")


# -- invariants: read afresh, never from the results the workflow remembers ------------------------


def _object(results: dict[str, Any], step: str, field: str) -> dict[str, Any] | None:
    result = results.get(step)
    return provider().get(result[field]) if isinstance(result, dict) and field in result else None


@invariant("inventory_held")
def inventory_held(facts: dict[str, Any], results: dict[str, Any]) -> Verdict:
    found = _object(results, "reserve_inventory", "reservation_id")
    if found is None:
        return Verdict(False, "no reservation")
    return Verdict(found["status"] == "held" and found["quantity"] == facts["quantity"], f"reservation is {found['status']}")


@invariant("payment_captured")
def payment_captured(facts: dict[str, Any], results: dict[str, Any]) -> Verdict:
    found = _object(results, "charge_payment", "charge_id")
    if found is None:
        return Verdict(False, "no charge")
    ok = found["amount_cents"] == facts["amount_cents"] and found["refunded_cents"] == 0
    return Verdict(ok, f"charged {found['amount_cents']}, refunded {found['refunded_cents']}")


@invariant("shipment_accepted")
def shipment_accepted(facts: dict[str, Any], results: dict[str, Any]) -> Verdict:
    found = _object(results, "schedule_fulfillment", "shipment_id")
    if found is None:
        return Verdict(False, "no shipment")
    return Verdict(found["status"] == "accepted", f"the carrier's record says {found['status']}")
