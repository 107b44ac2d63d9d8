"""A payment provider in this process, for the reconciliation tests: it can lose a response
(the charge lands, the caller sees a timeout), fail before a charge reaches it, lie about a
refund (returns as if done, changes nothing), or be unable to answer a question.

Its compensator and reconcilers are registered on import, under ``rw.*``.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_saga import Observation, compensator, inverse_of, reconciler

__all__ = ["WORLD", "Died", "World", "charge", "refund"]


class Died(BaseException):
    """The calling process is dead (a test's crash): nothing it calls has any effect."""


class World:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.by_key: dict[str, dict[str, Any]] = {}  # idempotency key -> charge
        self.by_id: dict[str, dict[str, Any]] = {}
        self.refund_calls: list[str] = []
        self.lose: set[int] = set()  # steps whose charge lands but whose response is lost
        self.never: set[int] = set()  # steps whose charge fails before reaching the provider
        self.lie: set[int] = set()  # steps whose refund says yes and does nothing
        self.blind = False  # the provider cannot answer questions
        self.dead = False  # the caller's process has died: its calls reach nobody

    def standing(self) -> list[dict[str, Any]]:
        return [c for c in self.by_id.values() if not c["refunded"]]


WORLD = World()


def charge(amount: int, step: int = 0, idempotency_key: str | None = None) -> dict[str, Any]:
    w = WORLD
    with w.lock:
        if w.dead:
            raise Died
        if step in w.never:
            raise ConnectionError("connect timeout: the request never left")
        key = idempotency_key or f"nokey-{len(w.by_id)}"
        found = w.by_key.get(key)
        if found is None:
            found = {"id": f"ch_{len(w.by_id) + 1}", "amount": amount, "refunded": False,
                     "lie": step in w.lie, "key": key}
            w.by_key[key] = w.by_id[found["id"]] = found
        if step in w.lose:
            w.lose.discard(step)
            raise TimeoutError("read timeout: the charge landed, the response was lost")
        return {"id": found["id"], "amount": amount}


@inverse_of(charge, maps={"charge_id": "id"})
@compensator("rw.refund")
def refund(charge_id: str, idempotency_key: str | None = None) -> None:
    w = WORLD
    with w.lock:
        if w.dead:
            raise Died
        w.refund_calls.append(charge_id)
        found = w.by_id[charge_id]
        if not found["lie"]:
            found["refunded"] = True


@reconciler("rw.charge")
def observe_charge(*, amount: int, idempotency_key: str, step: int = 0) -> Observation:
    if WORLD.blind:
        return Observation(None, detail="provider API down")
    found = WORLD.by_key.get(idempotency_key)
    if found is None:
        return Observation(exists=False, detail="no charge with that key")
    return Observation(exists=True, reversed_=found["refunded"], amount=found["amount"],
                       result={"id": found["id"], "amount": found["amount"]},
                       detail="refunded" if found["refunded"] else "succeeded")


@reconciler("rw.refund")
def observe_refund(*, charge_id: str) -> Observation:
    if WORLD.blind:
        raise ConnectionError("provider API down")
    found = WORLD.by_id.get(charge_id)
    if found is None:
        return Observation(None, detail=f"no charge {charge_id}")
    return Observation(exists=True, reversed_=found["refunded"], amount=found["amount"])
