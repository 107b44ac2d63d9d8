"""A step run by another service joins the caller's saga: two real uvicorn processes.

Service A (``caller_app``) runs sagas whose step ``http:billing`` is a request to service B
(``billing_app``) through ``SagaTransport``; B serves it under ``SagaContextMiddleware``
and declares its undo. Each test ends with both logs verifying.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import Server, wait_for

from agent_saga.audit import verify_log
from agent_saga.distributed import SagaContext, sign_token
from agent_saga.distributed._token import trusted_keys, verify_receipt
from agent_saga.log.file import read_records
from agent_saga.notekeys import generate_signer

pytestmark = pytest.mark.slow


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.signer, self.verifier = generate_signer("billing.test/tokens", "http")
        self.billing_world = tmp_path / "billing-world"
        self.billing_world.mkdir()
        self.billing = Server(
            "billing_app", tmp_path, "billing", BILLING_WORLD=str(self.billing_world),
            BILLING_WAL=str(tmp_path / "billing.wal"), BILLING_LEDGER=str(tmp_path / "billing.ledger"),
            BILLING_SIGNER=self.signer,
        )
        self.caller = Server(
            "caller_app", tmp_path, "caller", CALLER_WAL=str(tmp_path / "caller.wal"),
            BILLING_URL=self.billing.url, BILLING_VERIFIER=self.verifier, AGENT_SAGA_LEASE_TTL="1",
        )
        self.billing_wal = tmp_path / "billing.wal"
        self.caller_wal = tmp_path / "caller.wal"

    def effects(self) -> list[str]:
        log = self.billing_world / "effects.log"
        return log.read_text().splitlines() if log.exists() else []

    def records(self, which: str) -> list[dict[str, Any]]:
        return list(read_records(self.caller_wal if which == "caller" else self.billing_wal))

    def caller_saga(self, order: str) -> list[dict[str, Any]]:
        records = self.records("caller")
        (saga_id,) = {r["saga"] for r in records
                      if r["type"] == "SAGA_STARTED" and f"order:{order}" in r["body"].get("tags", [])}
        return [r for r in records if r["saga"] == saga_id]

    def reconciled(self, order: str) -> tuple[str, str]:
        """``agent-saga reconcile``'s finding for the order's remote step, asked from this process."""
        from agent_saga.distributed import forget_services, trust_service
        from agent_saga.reconciliation import reconcile

        saga_id = self.caller_saga(order)[0]["saga"]
        trust_service("billing", self.billing.url, [self.verifier])
        try:
            (finding,) = [f for f in reconcile(self.caller_wal).findings if f.saga == saga_id]
        finally:
            forget_services()
        return finding.status, finding.observed

    def both_logs_verify(self) -> None:
        for wal in (self.caller_wal, self.billing_wal):
            report = verify_log(wal)
            assert report.ok, (wal, report)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        w.billing.start().wait_ready()
        w.caller.start().wait_ready()
        yield w
    finally:
        w.caller.close()
        w.billing.close()


def types(records: list[dict[str, Any]]) -> list[str]:
    return [r["type"] for r in records]


def test_happy_path_the_remote_step_is_a_compensable_step_of_the_callers_saga(world: World) -> None:
    answer = world.caller.http.post("/orders/o-1")
    assert answer.status_code == 200, world.caller.log()
    assert answer.json()["billing"] == {"charge": "o-1"}
    assert world.effects() == ["charge o-1"]
    saga = world.caller_saga("o-1")
    intent = next(r for r in saga if r["type"] == "STEP_INTENT")
    assert intent["body"]["tool"] == "http:billing" and intent["body"]["semantics"] == "COMPENSABLE"
    assert intent["body"]["args"] == {"service": "billing", "method": "POST", "path": "/charges/o-1"}
    assert intent["body"]["recipe"]["handler"] == "agent_saga.http.compensate"
    committed = next(r for r in saga if r["type"] == "STEP_COMMITTED")
    undo = committed["body"]["compensation"]
    assert undo["handler"] == "agent_saga.http.compensate" and undo["recoverable"] is True
    assert undo["kwargs"]["service"] == "billing" and undo["kwargs"]["signed_undo"].startswith("v1.")
    assert saga[-1]["type"] == "SAGA_COMPLETED"
    assert world.reconciled("o-1") == ("confirmed", "standing")
    # The service's side: the route ran in a saga of its own log, tagged with the caller's key.
    started = [r for r in world.records("billing") if r["type"] == "SAGA_STARTED"]
    assert next(r["body"]["tags"] for r in started).count(f"key:{intent['body']['op']}") == 1
    world.both_logs_verify()
    # graph on the caller shows the remote step with its service name
    graph = subprocess.run([sys.executable, "-m", "agent_saga", "graph", "--wal", str(world.caller_wal)],
                           capture_output=True, text=True, check=True)
    assert "http:billing" in graph.stdout


def test_the_caller_fails_after_the_remote_step_and_the_remote_undo_runs_once(world: World) -> None:
    answer = world.caller.http.post("/orders/o-2", params={"fail": 1})
    assert answer.status_code == 409 and answer.json()["detail"]["clean"] is True, world.caller.log()
    saga = world.caller_saga("o-2")
    assert "STEP_COMPENSATED" in types(saga) and saga[-1]["type"] == "SAGA_ROLLED_BACK"
    (refund,) = [e for e in world.effects() if e.startswith("refund")]
    assert refund.startswith("refund o-2 ")
    # The same compensation asked again (a daemon retrying after a lost answer) changes nothing.
    token = next(r for r in saga if r["type"] == "STEP_COMMITTED")["body"]["compensation"]["kwargs"]["signed_undo"]
    again = httpx.post(f"{world.billing.url}/_saga/compensate", json={"token": token, "key": "k"})
    assert again.status_code == 200 and (again.json()["state"], again.json()["first"]) == ("compensated", False)
    verify_receipt(again.json()["receipt"], trusted_keys([world.verifier], "test"), service="billing", token=token)
    assert world.effects() == ["charge o-2", refund]
    # The reconciliation pass asks billing's ledger, through the same reconciler: the undo is in effect.
    assert world.reconciled("o-2") == ("confirmed", "reversed")
    world.both_logs_verify()


def test_the_caller_killed_after_the_remote_step_its_daemon_runs_the_remote_undo(world: World) -> None:
    with pytest.raises(httpx.TransportError):
        world.caller.http.post("/orders/o-3", params={"die": 1})
    assert world.caller.wait_dead() == -9
    assert world.effects() == ["charge o-3"]
    world.caller.start().wait_ready()  # the caller comes back: its recovery daemon sweeps the log
    wait_for(lambda: any(e.startswith("refund o-3") for e in world.effects()), "the remote undo")
    wait_for(lambda: world.caller_saga("o-3")[-1]["type"] == "SAGA_ROLLED_BACK", "the daemon's rollback")
    assert [e.split()[0] for e in world.effects()] == ["charge", "refund"]
    saga = world.caller_saga("o-3")
    compensated = next(r for r in saga if r["type"] == "STEP_COMPENSATED")
    assert compensated["step"] == 1
    world.both_logs_verify()


def test_the_service_killed_before_its_answer_the_step_is_reconciled_from_its_ledger(world: World) -> None:
    result: dict[str, Any] = {}

    def order() -> None:
        result["answer"] = world.caller.http.post("/orders/o-4", params={"billing_dies": 1})

    thread = threading.Thread(target=order)
    thread.start()
    assert world.billing.wait_dead() == -9  # it charged, recorded the key, and died before answering
    world.billing.start()  # the same port: the caller's question waits in the backlog
    thread.join(120)
    answer = result["answer"]
    assert answer.status_code == 200, world.caller.log()
    assert answer.json()["billing"] == {"charge": "o-4"}  # the answer the ledger kept for the key
    assert world.effects() == ["charge o-4"]
    saga = world.caller_saga("o-4")
    answered = [r for r in saga if r["type"] == "RECONCILE_ANSWERED"]
    assert answered[-1]["body"]["exists"] is True
    committed = next(r for r in saga if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["reconciled"] is True
    assert committed["body"]["compensation"]["kwargs"]["signed_undo"].startswith("v1.")
    assert saga[-1]["type"] == "SAGA_COMPLETED"
    world.both_logs_verify()


def _served_token(world: World, order: str, key: str) -> str:
    context = SagaContext("ab" * 16, 1, key)
    answer = httpx.post(f"{world.billing.url}/charges/{order}", headers={"saga-context": context.header()})
    assert answer.status_code == 200
    return answer.headers["saga-compensation"]


def _payload(token: str) -> dict[str, Any]:
    raw = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))


def _encode(value: dict[str, Any]) -> str:
    raw = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_forged_or_altered_token_is_refused_and_recorded(world: World) -> None:
    token = _served_token(world, "o-5", "5" * 32)
    version, _, signature = token.split(".")
    altered_payload = _payload(token)
    altered_payload["kwargs"] = {"order": "someone-elses-order"}
    altered = f"{version}.{_encode(altered_payload)}.{signature}"
    attacker_signer, _ = generate_signer("billing.test/tokens", "http")  # same name, another key
    forged = sign_token(attacker_signer, "billing", SagaContext("ab" * 16, 1, "5" * 32), "billing.refund",
                        {"order": "o-5"})
    # Signed by billing's real key, but for a key billing never served.
    unissued = sign_token(world.signer, "billing", SagaContext("ab" * 16, 1, "6" * 32), "billing.refund",
                          {"order": "o-5"})
    errors = []
    for bad in (altered, forged, unissued, "not a token"):
        refused = httpx.post(f"{world.billing.url}/_saga/compensate", json={"token": bad, "key": "k"})
        assert refused.status_code == 403, refused.text
        errors.append(refused.json()["error"])
    assert all(e.startswith("compensation token refused") for e in errors)
    assert "its signature does not match" in errors[0] and "does not trust" in errors[1]
    assert "not the token this service issued" in errors[2]
    assert world.effects() == ["charge o-5"]  # nothing was undone
    # Counted, not written out: one record for the window, for the first refusal.
    (refusals,) = [r for r in world.records("billing") if r["type"] == "COMPENSATIONS_REFUSED"]
    assert refusals["body"]["rule"] == "compensation-token" and refusals["body"]["refused"] == 1
    assert "its signature does not match" in refusals["body"]["reason"]
    # The refusal names the token by its digest (a person can match it), never the token itself.
    assert refusals["body"]["presented_sha256"] == hashlib.sha256(altered.encode()).hexdigest()
    # The real token still works, once.
    real = httpx.post(f"{world.billing.url}/_saga/compensate", json={"token": token, "key": "k"})
    assert real.json()["state"] == "compensated" and real.json()["first"] is True
    assert world.effects() == ["charge o-5", "refund o-5 k"]
    world.both_logs_verify()


def test_the_same_key_retried_has_one_effect(world: World) -> None:
    headers = {"saga-context": SagaContext("cd" * 16, 2, "7" * 32).header()}
    first = httpx.post(f"{world.billing.url}/charges/o-6", headers=headers)
    second = httpx.post(f"{world.billing.url}/charges/o-6", headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"charge": "o-6"}
    assert first.headers["saga-compensation"] == second.headers["saga-compensation"]
    assert world.effects() == ["charge o-6"]
    # A key the reconciler asked about before any request came is fenced: a late request is refused.
    fenced = httpx.get(f"{world.billing.url}/_saga/status/{'8' * 32}").json()
    assert fenced["state"] == "fenced"
    late = httpx.post(f"{world.billing.url}/charges/o-7",
                      headers={"saga-context": SagaContext("cd" * 16, 3, "8" * 32).header()})
    assert late.status_code == 409
    assert world.effects() == ["charge o-6"]
    # A hostile header is refused with one line, never echoed, and nothing runs.
    hostile = httpx.post(f"{world.billing.url}/charges/o-8", headers={"saga-context": "00-" + "x" * 74})
    assert hostile.status_code == 400 and "x" * 10 not in hostile.text
    assert world.effects() == ["charge o-6"]
    world.both_logs_verify()


@pytest.fixture
def billing_only(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        w.billing.start().wait_ready()
        yield w
    finally:
        w.caller.close()  # never started: its socket and client closed
        w.billing.close()


def test_requests_through_the_adapter_the_in_process_rollback_undoes_the_remote_step(billing_only: World,
                                                                                      tmp_path: Path) -> None:
    import requests

    from agent_saga import FileWAL, SagaAborted, saga_scope
    from agent_saga.distributed import forget_services, trust_service
    from agent_saga.distributed.requests_adapter import SagaAdapter

    world = billing_only
    trust_service("billing", world.billing.url, [world.verifier])
    session = requests.Session()
    session.mount(world.billing.url + "/", SagaAdapter())
    wal = FileWAL(tmp_path / "in-process.wal")
    try:
        with pytest.raises(SagaAborted) as aborted, saga_scope(wal, tags={"order:o-9"}):
            answer = session.post(f"{world.billing.url}/charges/o-9")
            assert answer.json() == {"charge": "o-9"} and answer.headers["saga-compensation"].startswith("v1.")
            raise RuntimeError("the next step failed")
        assert aborted.value.report.clean
    finally:
        forget_services()
        session.close()
        wal.close()
    assert [e.split()[:2] for e in world.effects()] == [["charge", "o-9"], ["refund", "o-9"]]
    assert verify_log(tmp_path / "in-process.wal").ok and verify_log(world.billing_wal).ok
