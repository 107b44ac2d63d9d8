"""A lost response is settled by asking the provider before the step is called UNKNOWN."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_saga import (
    Compensation,
    MemoryWAL,
    NotApplied,
    Observation,
    RetryPolicy,
    SagaAborted,
    StepState,
    compensator,
    inverse_of,
    reconciler,
    saga_scope,
)
from agent_saga.credentials import CredentialError, credential_ref, set_credential_resolver
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.registry import from_recipe, unregister, unregister_reconciler

FAST = ReconcilePolicy(delay=0, attempts=3, backoff=1, timeout=5)


class Provider:
    """A payment provider whose responses can be lost after it took the charge."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}  # idempotency key -> charge
        self.refunds: list[str] = []
        self.lose_next = False
        self.fail_before_next = False
        self.lock = threading.Lock()

    def charge(self, amount: int, idempotency_key: str) -> dict[str, Any]:
        with self.lock:
            if self.fail_before_next:
                self.fail_before_next = False
                raise TimeoutError("connect timeout")  # never reached the provider
            charge = self.charges.setdefault(idempotency_key, {"id": f"ch_{len(self.charges) + 1}", "amount": amount})
            if self.lose_next:
                self.lose_next = False
                raise TimeoutError("read timeout")  # it landed; the answer was lost
            return dict(charge)

    def refund(self, charge_id: str) -> None:
        with self.lock:
            self.refunds.append(charge_id)


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()

    @compensator("recon.refund")
    def refund(charge_id: str) -> None:
        p.refund(charge_id)

    @reconciler("recon.charge")
    def observe(*, amount: int, idempotency_key: str) -> Observation:
        charge = p.charges.get(idempotency_key)
        if charge is None:
            return Observation(exists=False, detail="no charge with that key")
        return Observation(exists=True, result=dict(charge), amount=charge["amount"], detail="succeeded")

    p.undo = refund  # type: ignore[attr-defined]
    yield p
    unregister("recon.refund")
    unregister_reconciler("recon.charge")


def _charge(s: Any, p: Provider, **options: Any) -> Any:
    return s.execute(
        tool="recon.charge", semantics="COMPENSABLE", args={"amount": 42},
        forward=lambda idempotency_key: p.charge(42, idempotency_key),
        compensate=lambda r: Compensation(fn=p.undo, handler="recon.refund",  # type: ignore[attr-defined]
                                          kwargs={"charge_id": r["id"]}),
        reconcile=FAST, **options,
    )


def test_a_charge_whose_response_was_lost_is_committed_and_refunded_exactly_once(provider: Provider) -> None:
    wal = MemoryWAL()
    provider.lose_next = True
    with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
        assert _charge(s, provider) == {"id": "ch_1", "amount": 42}  # the provider's own answer
        raise RuntimeError("a later step failed")
    assert list(provider.charges.values()) == [{"id": "ch_1", "amount": 42}]  # exactly one charge
    assert provider.refunds == ["ch_1"]  # refunded exactly once
    assert info.value.report.clean
    types = [r["type"] for r in wal.records()]
    assert types[types.index("STEP_INTENT"):types.index("STEP_COMMITTED") + 1] == [
        "STEP_INTENT", "RECONCILE_ASKED", "RECONCILE_ANSWERED", "STEP_COMMITTED"]
    committed = next(r for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["reconciled"] is True
    assert committed["body"]["compensation"]["kwargs"] == {"charge_id": "ch_1"}


def test_a_call_that_never_reached_the_provider_is_not_applied_and_retried_with_the_same_key(
    provider: Provider,
) -> None:
    wal = MemoryWAL()
    provider.fail_before_next = True
    with saga_scope(wal) as s:
        out = _charge(s, provider, retry=RetryPolicy(max_attempts=2, base_delay=0))
    assert out["id"] == "ch_1" and len(provider.charges) == 1
    answers = [r["body"]["exists"] for r in wal.records() if r["type"] == "RECONCILE_ANSWERED"]
    assert answers == [False]  # asked once, after the failed attempt; the retry then landed


def test_not_landed_without_a_retry_is_a_step_that_needs_no_undo(provider: Provider) -> None:
    provider.fail_before_next = True
    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        _charge(s, provider)
    assert isinstance(info.value.cause, NotApplied)
    assert "did not happen" in str(info.value.cause)
    assert info.value.report.clean and info.value.report.steps == ()  # nothing ran, nothing to undo
    assert s.steps[0].state is StepState.NOT_APPLIED


@pytest.mark.parametrize("answer", ["raises", "unsure", "not an observation"])
def test_a_reconciler_that_cannot_tell_leaves_the_step_unknown_after_a_bounded_number_of_questions(
    answer: str,
) -> None:
    asked: list[str] = []

    @reconciler("recon.flaky")
    def observe(*, idempotency_key: str) -> Any:
        asked.append(idempotency_key)
        if answer == "raises":
            raise ConnectionError("provider API down")
        return Observation(exists=None) if answer == "unsure" else {"exists": True}

    def lost() -> None:
        raise TimeoutError("read timeout")

    wal = MemoryWAL()
    try:
        with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
            s.execute(tool="recon.flaky", semantics="IRREVERSIBLE", forward=lost, reconcile=FAST)
    finally:
        unregister_reconciler("recon.flaky")
    assert len(asked) == FAST.attempts and len(set(asked)) == 1  # bounded, one key
    assert s.steps[0].state is StepState.UNKNOWN
    assert not info.value.report.clean
    assert [r["body"]["exists"] for r in wal.records() if r["type"] == "RECONCILE_ANSWERED"] == [None] * 3


def test_reconcile_false_never_asks(provider: Provider) -> None:
    provider.lose_next = True
    with pytest.raises(SagaAborted), saga_scope(MemoryWAL()) as s:
        s.execute(tool="recon.charge", semantics="IRREVERSIBLE", args={"amount": 42},
                  forward=lambda idempotency_key: provider.charge(42, idempotency_key), reconcile=False)
    assert s.steps[0].state is StepState.UNKNOWN


async def test_an_async_reconciler_on_the_async_face(provider: Provider) -> None:
    @reconciler("recon.async")
    async def observe(*, idempotency_key: str) -> Observation:
        return Observation(exists=True, result={"id": "ch_async"})

    async def lost() -> None:
        raise TimeoutError("read timeout")

    try:
        async with saga_scope(MemoryWAL()) as s:
            assert await s.execute(tool="recon.async", semantics="REVERSIBLE", forward=lost, reconcile=FAST) == {
                "id": "ch_async"}
    finally:
        unregister_reconciler("recon.async")


def test_the_intent_carries_a_declarative_recipe_another_process_can_follow() -> None:
    def create_ticket(title: str) -> dict[str, str]:
        return {"key": "T-1"}

    @inverse_of(create_ticket, maps={"key": "key"})
    @compensator("recon.close_ticket")
    def close_ticket(key: str) -> None: ...

    wal = MemoryWAL()
    try:
        with saga_scope(wal) as s:
            s.execute(tool="tickets.create", semantics="COMPENSABLE", forward=functools.partial(create_ticket, "x"),
                      args={"title": "x"})
        intent = next(r for r in wal.records() if r["type"] == "STEP_INTENT")
        recipe = intent["body"]["recipe"]
        assert recipe == {"handler": "recon.close_ticket", "maps": {"key": "key"}}
        comp = from_recipe(json.loads(json.dumps(recipe)), {"key": "T-9"})
        assert comp.handler == "recon.close_ticket" and dict(comp.kwargs) == {"key": "T-9"}
    finally:
        unregister("recon.close_ticket")


def test_credentials_travel_as_references_and_are_resolved_only_at_use() -> None:
    used: list[str] = []

    @compensator("recon.revoke")
    def revoke(grant: str, api_key: str) -> None:
        used.append(api_key)
        raise PermissionError(f"key {api_key} was rejected")

    wal = MemoryWAL()
    set_credential_resolver(lambda name: f"sk_live_resolved_{name}")
    try:
        with pytest.raises(CredentialError, match="credential_ref"):
            Compensation(handler="recon.revoke", kwargs={"grant": "g", "api_key": "sk_live_12345678abc"})
        with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
            s.execute(tool="grant", semantics="COMPENSABLE", forward=lambda: {"id": "g1"},
                      compensate=lambda r: Compensation(handler="recon.revoke", kwargs={
                          "grant": r["id"], "api_key": credential_ref("stripe_prod")}))
            raise RuntimeError("later failure")
    finally:
        set_credential_resolver(None)
        unregister("recon.revoke")
    assert used[0] == "sk_live_resolved_stripe_prod"  # resolved for the call
    text = json.dumps(list(wal.records())) + info.value.report.format_text()
    assert "sk_live_resolved" not in text  # never in a record, a report or an error message
    assert '"$credential_ref": "stripe_prod"' in text.replace('":"', '": "')


def test_a_reference_without_a_resolver_fails_the_undo_naming_the_reference_not_a_value() -> None:
    @compensator("recon.need_key")
    def need(api_key: str) -> None: ...

    try:
        with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
            s.execute(tool="t", semantics="COMPENSABLE", forward=lambda: 1,
                      compensate=Compensation(handler="recon.need_key", kwargs={"api_key": credential_ref("vault_x")}))
            raise RuntimeError("later failure")
    finally:
        unregister("recon.need_key")
    failed = info.value.report.failed[0]
    assert "vault_x" in failed.detail and "set_credential_resolver" in failed.detail
