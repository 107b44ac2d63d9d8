"""Stripe (COMPENSABLE): a charge undone by a refund, and a reconciler for each.

Inside a saga, ``charge(...)`` is a step named ``stripe.charge``: its idempotency key
is the step's deterministic operation id (sent as Stripe's ``Idempotency-Key`` and
kept in the charge's metadata, so the charge can be found again), and its undo is
``stripe.refund``, declared with ``@inverse_of`` so that another process can build it
from the charge alone (the crash window heals itself). A refund's key is the step's
deterministic compensation key; ``charge_already_refunded`` counts as success, so a
late daemon does not loop. ``credential_ref`` names the API key; it is resolved at
the moment of each call (``set_credential_resolver``) and only the name is logged.

Point the SDK elsewhere (a test server, a proxy) with ``stripe.api_base``.
"""

from __future__ import annotations

import re
from typing import Any

from agent_saga.connectors._common import require, secret
from agent_saga.decorators import tool
from agent_saga.registry import compensator, inverse_of, reconciler
from agent_saga.semantics import Observation

stripe = require("stripe", "stripe", "stripe")

__all__ = ["DEFAULT_CREDENTIAL", "OP_METADATA", "charge", "observe_charge", "observe_refund", "refund"]

#: The credential name used when a call names none.
DEFAULT_CREDENTIAL = "stripe"
#: The charge metadata field that carries the step's operation id.
OP_METADATA = "agent_saga_op"
_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}\Z")


def _client(credential_ref: str) -> Any:
    api_key, _ = secret(credential_ref)
    # No retries inside the SDK: the step's own policy decides, with the same key.
    return stripe.StripeClient(api_key, base_addresses={"api": stripe.api_base}, max_network_retries=0)


def _summary(found: Any, credential_ref: str) -> dict[str, Any]:
    """What a charge step returns (and what its reconciler reports as the result)."""
    return {
        "id": found.id, "amount": found.amount, "currency": found.currency, "status": found.status,
        "credential_ref": credential_ref,
    }


def _charge(
    amount: int, currency: str, source: str, *, credential_ref: str = DEFAULT_CREDENTIAL,
    description: str = "", idempotency_key: str | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"amount": amount, "currency": currency, "source": source}
    if description:
        params["description"] = description
    options: dict[str, Any] = {}
    if idempotency_key:
        params["metadata"] = {OP_METADATA: idempotency_key}
        options["idempotency_key"] = idempotency_key
    found = _client(credential_ref).v1.charges.create(params, options)
    return _summary(found, credential_ref)


@inverse_of(_charge, maps={"charge_id": "id", "credential_ref": "credential_ref"})
@compensator("stripe.refund")
def refund(charge_id: str, credential_ref: str = DEFAULT_CREDENTIAL, idempotency_key: str | None = None) -> dict[str, Any]:
    """Refund ``charge_id`` in full; a charge already refunded counts as done."""
    options = {"idempotency_key": idempotency_key} if idempotency_key else {}
    try:
        done = _client(credential_ref).v1.refunds.create({"charge": charge_id}, options)
    except stripe.InvalidRequestError as err:
        if err.code == "charge_already_refunded":
            return {"charge": charge_id, "status": "already_refunded"}
        raise
    return {"id": done.id, "charge": charge_id, "status": done.status}


charge = tool(_charge, semantics="COMPENSABLE", name="stripe.charge")
charge.__name__ = charge.__qualname__ = "charge"
charge.__doc__ = """Charge ``amount`` (smallest currency unit) to ``source``: a saga step named ``stripe.charge``.

Returns ``{"id", "amount", "currency", "status", "credential_ref"}``; a rollback refunds it.
"""


@reconciler("stripe.charge")
def observe_charge(
    *, idempotency_key: str | None = None, credential_ref: str = DEFAULT_CREDENTIAL, **_: Any
) -> Observation:
    """Did the charge with this step's key land? Found through the key kept in its metadata.

    Not finding it is not proof that it did not land (Stripe's search index can lag a
    write by up to a minute), so absence is reported as "could not tell".
    """
    if not idempotency_key or not _KEY.match(idempotency_key):
        return Observation(None, detail="no usable idempotency key to look the charge up by")
    query = f"metadata['{OP_METADATA}']:'{idempotency_key}'"
    found = _client(credential_ref).v1.charges.search({"query": query, "limit": 2}).data
    if not found:
        return Observation(None, detail="no charge found by its key yet (search can lag a write; not proof)")
    if len(found) > 1:
        return Observation(None, detail=f"{len(found)} charges carry this key: a human must look")
    hit = found[0]
    return Observation(
        exists=hit.status != "failed", reversed_=bool(hit.refunded), amount=hit.amount,
        detail=f"{hit.id} {hit.status}" + (", refunded" if hit.refunded else ""),
        result=_summary(hit, credential_ref),
    )


@reconciler("stripe.refund")
def observe_refund(*, charge_id: str, credential_ref: str = DEFAULT_CREDENTIAL, **_: Any) -> Observation:
    """Is the refund of ``charge_id`` really in effect? Asks the charge, not the refund's 200."""
    try:
        found = _client(credential_ref).v1.charges.retrieve(charge_id)
    except stripe.InvalidRequestError as err:
        if err.code == "resource_missing":
            return Observation(None, detail=f"Stripe has no charge {charge_id} (wrong account or key?)")
        raise
    return Observation(
        exists=True, reversed_=bool(found.refunded), amount=found.amount,
        detail=f"{found.id} {found.status}, refunded {found.amount_refunded} of {found.amount}",
    )
