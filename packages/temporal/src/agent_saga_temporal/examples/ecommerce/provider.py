"""The simulated provider of the checkout: stock, payments and a carrier, in one JSON file.

It lives outside the worker process (a file under a lock), so it outlives a killed
worker and can be asked afterwards what really happened. Every change it applies is
appended to ``effects``: that list, not the workflow's opinion, is what the tests and
the example count. It honours no idempotency key on purpose, so a repeated call
shows as a second effect instead of being quietly absorbed.

Faults are set per order when the order is created:

* ``lose_reply``: step names whose reply is lost once, after the change was applied;
* ``carrier_rejects``: the carrier accepts the shipment, then rejects it;
* ``refund_lies``: a refund answers "refunded" and changes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["Provider", "ReplyLost"]

T = TypeVar("T")


class ReplyLost(ConnectionError):
    """The provider applied the change, but its answer never arrived."""


class Provider:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """The state under an exclusive lock, written back (atomically, synced) on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.path.read_text()) if self.path.exists() else {
                "orders": {}, "objects": {}, "effects": [], "next": 1,
            }
            yield state
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w") as fh:
                json.dump(state, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)

    def _read(self, fn: Callable[[dict[str, Any]], T]) -> T:
        with self._state() as state:
            return fn(state)

    # -- setup and inspection -------------------------------------------------------------

    def open_order(self, order_id: str, *, faults: dict[str, Any]) -> bool:
        """Create the order with its faults; False (and nothing changed) if it exists."""
        with self._state() as state:
            if order_id in state["orders"]:
                return False
            state["orders"][order_id] = {"faults": faults, "stock": 10}
            return True

    def set_faults(self, order_id: str, **faults: Any) -> None:
        """Change an order's faults (the refund service is repaired, say)."""
        with self._state() as state:
            self._faults(state, order_id).update(faults)

    def effects(self, order_id: str) -> list[dict[str, Any]]:
        return self._read(lambda s: [e for e in s["effects"] if e["order_id"] == order_id])

    def get(self, object_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._read(lambda s: s["objects"].get(object_id))
        return found

    def find(self, kind: str, key: str) -> dict[str, Any] | None:
        """The object of ``kind`` created under idempotency key ``key`` (what a reconciler asks)."""
        return self._read(
            lambda s: next((o for o in s["objects"].values() if o["kind"] == kind and o["key"] == key), None)
        )

    # -- changes ----------------------------------------------------------------------------

    def _create(self, state: dict[str, Any], kind: str, order_id: str, key: str, **fields: Any) -> dict[str, Any]:
        object_id = f"{kind[:3]}_{state['next']}"
        state["next"] += 1
        obj = {"id": object_id, "kind": kind, "order_id": order_id, "key": key, **fields}
        state["objects"][object_id] = obj
        state["effects"].append({"op": f"create {kind}", "object": object_id, "order_id": order_id, "key": key})
        return obj

    def _change(self, state: dict[str, Any], object_id: str, op: str, key: str, **fields: Any) -> dict[str, Any]:
        obj: dict[str, Any] | None = state["objects"].get(object_id)
        if obj is None:
            raise LookupError(f"no such object {object_id!r}")
        obj.update(fields)
        state["effects"].append({"op": op, "object": object_id, "order_id": obj["order_id"], "key": key})
        return obj

    @staticmethod
    def _faults(state: dict[str, Any], order_id: str) -> dict[str, Any]:
        order = state["orders"].get(order_id)
        if order is None:
            raise LookupError(f"unknown order {order_id!r}")
        faults: dict[str, Any] = order["faults"]
        return faults

    def _lose_reply_once(self, state: dict[str, Any], order_id: str, step: str) -> bool:
        lost = self._faults(state, order_id).get("lose_reply", [])
        if step in lost:
            lost.remove(step)
            return True
        return False

    def reserve(self, order_id: str, sku: str, quantity: int, key: str) -> dict[str, Any]:
        with self._state() as state:
            self._faults(state, order_id)
            obj = self._create(state, "reservation", order_id, key, sku=sku, quantity=quantity, status="held")
            lost = self._lose_reply_once(state, order_id, "reserve_inventory")
        if lost:
            raise ReplyLost("the stock service took the reservation but its reply was lost")
        return {"reservation_id": obj["id"]}

    def release(self, reservation_id: str, key: str) -> None:
        with self._state() as state:
            self._change(state, reservation_id, "release reservation", key, status="released")

    def charge(self, order_id: str, amount_cents: int, customer: str, key: str) -> dict[str, Any]:
        with self._state() as state:
            self._faults(state, order_id)
            obj = self._create(
                state, "charge", order_id, key, amount_cents=amount_cents, customer=customer, refunded_cents=0,
            )
            lost = self._lose_reply_once(state, order_id, "charge_payment")
        if lost:
            raise ReplyLost("the payment service took the charge but its reply was lost")
        return {"charge_id": obj["id"], "amount_cents": amount_cents}

    def refund(self, charge_id: str, amount_cents: int, key: str) -> dict[str, Any]:
        with self._state() as state:
            charge = state["objects"].get(charge_id)
            if charge is None:
                raise LookupError(f"no such charge {charge_id!r}")
            if self._faults(state, charge["order_id"]).get("refund_lies"):
                return {"status": "refunded"}  # and nothing changed
            self._change(state, charge_id, "refund charge", key,
                         refunded_cents=charge["refunded_cents"] + amount_cents)
        return {"status": "refunded"}

    def schedule(self, order_id: str, address: str, key: str) -> dict[str, Any]:
        with self._state() as state:
            rejects = self._faults(state, order_id).get("carrier_rejects", False)
            # The carrier says yes now; with the fault, its own record already says no.
            obj = self._create(
                state, "shipment", order_id, key, address=address, status="rejected" if rejects else "accepted",
            )
            lost = self._lose_reply_once(state, order_id, "schedule_fulfillment")
        if lost:
            raise ReplyLost("the carrier took the shipment but its reply was lost")
        return {"shipment_id": obj["id"], "status": "accepted"}

    def cancel(self, shipment_id: str, key: str) -> None:
        with self._state() as state:
            self._change(state, shipment_id, "cancel shipment", key, status="cancelled")
