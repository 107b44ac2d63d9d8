"""A payment whose response is lost: agent-saga asks the provider instead of guessing.

Run it offline: ``python examples/lost_response.py`` (it writes two logs in the current
directory). The payment provider is a small class in this file; with a real one you would
use ``agent_saga.connectors.stripe``, which registers the same three pieces.

1. The charge reaches the provider, but its answer is lost (a read timeout). The
   ``@reconciler`` registered for the tool asks the provider by the step's idempotency
   key: it landed. The step is committed with the provider's own result...
2. ...so when a later step fails, the rollback refunds it: one charge, refunded once.
3. ``reconcile()``, the later pass, asks again and confirms the refund is in effect.
4. Run again with a refund that answers "ok" and changes nothing: the log's rollback
   says clean, the reconciliation pass says DRIFT and names the step.
"""

from __future__ import annotations

import functools
from typing import Any

from agent_saga import FileWAL, Observation, SagaAborted, compensator, inverse_of, reconciler, saga_scope
from agent_saga.reconciliation import reconcile


class Provider:
    """A payment provider that dedupes by idempotency key (as real ones do)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, refunds_lie: bool = False) -> None:
        self.charges: dict[str, dict[str, Any]] = {}  # by idempotency key
        self.lose_next_answer = True
        self.refunds_lie = refunds_lie

    def charge(self, amount: int, key: str) -> dict[str, Any]:
        found = self.charges.setdefault(key, {"id": f"ch_{len(self.charges) + 1}", "amount": amount, "refunded": False})
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise TimeoutError("read timeout: the charge landed, its answer did not")
        return {"id": found["id"], "amount": amount}

    def refund(self, charge_id: str) -> None:
        if not self.refunds_lie:
            next(c for c in self.charges.values() if c["id"] == charge_id)["refunded"] = True


PROVIDER = Provider()


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    return PROVIDER.charge(amount, idempotency_key)


@inverse_of(charge, maps={"charge_id": "id"})  # the undo, by name: any process can build it
@compensator("pay.refund")
def refund(charge_id: str) -> None:
    PROVIDER.refund(charge_id)


@reconciler("pay.charge")  # did the charge with this key land?
def observe_charge(*, amount: int, idempotency_key: str) -> Observation:
    found = PROVIDER.charges.get(idempotency_key)
    if found is None:
        return Observation(exists=False, detail="no charge with that key")
    return Observation(exists=True, reversed_=found["refunded"], amount=found["amount"],
                       result={"id": found["id"], "amount": found["amount"]})


@reconciler("pay.refund")  # is the refund really in effect? (asks the charge, not the refund's answer)
def observe_refund(*, charge_id: str) -> Observation:
    found = next(c for c in PROVIDER.charges.values() if c["id"] == charge_id)
    return Observation(exists=True, reversed_=found["refunded"], amount=found["amount"])


def checkout(log: str) -> None:
    with FileWAL(log) as wal:
        try:
            with saga_scope(wal, name="checkout") as saga:
                got = saga.execute(tool="pay.charge", semantics="COMPENSABLE", args={"amount": 4200},
                                   forward=functools.partial(charge, 4200))  # gets the step's key
                print(f"charge answered by the reconciler: {got}")
                raise RuntimeError("shipping refused the order")
        except SagaAborted as aborted:
            print(aborted.report.format_text().rstrip())
    charges = list(PROVIDER.charges.values())
    print(f"provider: {len(charges)} charge(s), refunded: {[c['refunded'] for c in charges]}")
    print(reconcile(log).format_text().rstrip())


if __name__ == "__main__":
    print("== an honest refund")
    checkout("lost-response.wal")
    print("== a refund that says yes and does nothing")
    PROVIDER.reset(refunds_lie=True)
    checkout("lying-refund.wal")
