"""A service's "compensated" is a signature, not an answer (issue 40 item 4).

Anything at a trusted service's URL (a catch-all route, a proxy, the wrong app deployed
there) that answered ``200 {"state": "compensated"}`` without undoing anything, even for a
garbage token, had the step recorded as undone and the reconciliation pass saying
"reversed". Now the service signs a receipt over the token's hash with its token key, and
the caller counts an undo done only with it; otherwise it is reported-but-unproven and a
person is asked. And a flood of refused compensation requests is counted, not written out
as four records each.

Real parts: a stdlib HTTP server on 127.0.0.1 as the thing that lies, the real
``SagaContextMiddleware`` over ASGI in process for the service that signs, FileWALs, the real
recovery daemon and reconciliation pass.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from connectors.local_http import JsonHandler, LocalServer

from agent_saga import Compensation, FileWAL, RecoveryDaemon, SagaAborted, saga_scope
from agent_saga.distributed import (
    SagaContext,
    SagaContextMiddleware,
    SagaTransport,
    forget_services,
    parse_saga_context,
    sign_token,
    trust_service,
)
from agent_saga.log import read_records
from agent_saga.notekeys import generate_signer
from agent_saga.reconciliation import reconcile

SIGNER, VERIFIER = generate_signer("billing.test/tokens", "http")
HANDLER = "agent_saga.http.compensate"


class Liar(LocalServer):
    """What answers at billing's URL: "compensated" to every request, having undone nothing."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        liar = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server calls it so
                liar.posts.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self.reply(200, {"state": "compensated", "first": True})

            def do_GET(self) -> None:  # noqa: N802
                token = liar.posts[-1]["token"] if liar.posts else None
                self.reply(200, {"state": "compensated", "token": token, "status": 200,
                                 "content_type": "application/json", "body": base64.b64encode(b"{}").decode()})

        super().__init__(Handler)


@pytest.fixture
def liar() -> Iterator[Liar]:
    with Liar() as server:
        trust_service("billing", server.url, [VERIFIER])  # billing is trusted at this URL
        yield server
        forget_services()


def _billing_forward(request: httpx.Request) -> httpx.Response:
    """The real billing's forward answer: its charge and a token signed with its key."""
    context = parse_saga_context(request.headers["saga-context"])
    token = sign_token(SIGNER, "billing", context, "billing.refund", {"order": "o-1"})
    return httpx.Response(200, json={"charge": "o-1"}, headers={"saga-compensation": token})


def _types(wal: FileWAL) -> list[str]:
    return [r["type"] for r in wal.records()]


def test_a_compensated_with_no_receipt_is_not_an_undo(liar: Liar, tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "caller.wal")
    http = httpx.Client(transport=SagaTransport(httpx.MockTransport(_billing_forward)))
    with pytest.raises(SagaAborted) as caught, saga_scope(wal, name="order") as saga:
        http.post(f"{liar.url}/charges/o-1")
        raise RuntimeError("the agent gave up")
    wal.barrier()
    assert liar.posts  # the undo was asked for, and "compensated" came back
    assert "STEP_COMPENSATED" not in _types(wal), "a bare 'compensated' was logged as the undo"
    assert not caught.value.report.clean
    failed = [r for r in wal.records() if r["type"] == "COMPENSATION_FAILED"]
    assert failed and "reported-but-unproven" in failed[-1]["body"]["error"]
    assert "there is none" in failed[-1]["body"]["error"]
    escalated = [r for r in wal.records() if r["type"] == "ESCALATED"]
    assert escalated, "the unproven undo is handed to a person"
    # The reconciliation pass asks billing's URL too: "compensated" without a receipt is not "reversed".
    (finding,) = [f for f in reconcile(wal.path).findings if f.saga == saga.saga_id]
    assert finding.observed != "reversed" and finding.status == "unverifiable", finding
    assert "reported compensated, unproven" in finding.detail


def test_the_daemon_does_not_count_a_garbage_tokens_compensated_as_done(liar: Liar, tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "caller.wal")
    boundary = saga_scope(wal, name="order")
    saga = boundary.__enter__()  # never exited: the process died here
    saga.execute(tool="http:billing", semantics="COMPENSABLE", forward=lambda: {"charge": "o-2"},
                 compensate=Compensation(handler=HANDLER, kwargs={"service": "billing", "signed_undo": "garbage"}))
    wal.barrier()
    with RecoveryDaemon(wal, clock=lambda: time.time() + 3600) as daemon:
        report = daemon.sweep()
    assert liar.posts == [{"token": "garbage", "key": liar.posts[0]["key"]}]
    assert report.compensated == 0 and report.dead_lettered == [saga.saga_id], report.summary()
    assert [e.kind for e in report.new_escalations] == ["compensation-unproven"]
    assert "STEP_COMPENSATED" not in [r["type"] for r in read_records(wal.path) if r["saga"] == saga.saga_id]


async def _refund(order: str, idempotency_key: str) -> None:
    """Billing's undo (never reached by a refused request)."""


async def _billing_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _billing(tmp_path: Path, now: list[float]) -> tuple[SagaContextMiddleware, FileWAL]:
    wal = FileWAL(tmp_path / "billing.wal")
    app = SagaContextMiddleware(_billing_app, service="billing", signer_key=SIGNER, ledger=tmp_path / "billing.ledger",
                                wal=wal, clock=lambda: now[0])
    return app, wal


def test_the_services_log_may_be_named_by_its_path(tmp_path: Path) -> None:
    # issue 44 §5: wal= takes what --wal-path takes; the middleware kept a path as a str.
    app = SagaContextMiddleware(_billing_app, service="billing", signer_key=SIGNER, ledger=tmp_path / "billing.ledger",
                                wal=str(tmp_path / "billing.wal"))
    assert isinstance(app.wal, FileWAL) and app.wal.path == tmp_path / "billing.wal"


async def test_fifty_refused_compensations_are_counted_not_written_out(tmp_path: Path) -> None:
    now = [1000.0]
    app, wal = _billing(tmp_path, now)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://billing") as http:
        for n in range(50):
            refused = await http.post("/_saga/compensate", json={"token": f"garbage {n}", "key": "k"})
            assert refused.status_code == 403
        assert app.refused == 50
        written = [r for r in wal.records() if r["type"] != "LEASE_RENEWED"]
        assert len(written) == 1, f"{len(written)} records for 50 refusals"
        (first,) = written
        assert first["type"] == "COMPENSATIONS_REFUSED" and first["body"]["refused"] == 1
        assert first["body"]["rule"] == "compensation-token" and "not v1" in first["body"]["reason"]
        now[0] += 60  # a window later, the next refusal carries the count of the ones in between
        await http.post("/_saga/compensate", json={"token": "garbage 51", "key": "k"})
    second = [r for r in wal.records() if r["type"] == "COMPENSATIONS_REFUSED"][-1]
    assert second["body"]["refused"] == 50 and app.refused == 51


async def test_the_service_signs_a_receipt_for_exactly_the_token_it_undid(tmp_path: Path) -> None:
    from agent_saga.distributed._token import ReceiptRefused, trusted_keys, verify_receipt
    from agent_saga.registry import compensator, unregister

    compensator("billing.refund")(_refund)
    app, _ = _billing(tmp_path, [1000.0])
    context = SagaContext("ab" * 16, 1, "5" * 32)
    keys = trusted_keys([VERIFIER], "test")
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://billing") as http:
            # Served for real, so the ledger holds the token billing issued for the key.
            app.ledger.claim(context)
            token = sign_token(SIGNER, "billing", context, "billing.refund", {"order": "o-5"})
            app.ledger.finish(context.key, "done", 200, "application/json", b"{}", token)
            done = (await http.post("/_saga/compensate", json={"token": token, "key": "k"})).json()
            status = (await http.get(f"/_saga/status/{context.key}")).json()
    finally:
        unregister("billing.refund")
    assert done["state"] == "compensated" and done["first"] is True
    for receipt in (done["receipt"], status["receipt"]):
        verify_receipt(receipt, keys, service="billing", token=token)
        with pytest.raises(ReceiptRefused, match="it is for another token"):
            verify_receipt(receipt, keys, service="billing", token=token + "x")
    _, forged_verifier = generate_signer("billing.test/tokens", "http")
    with pytest.raises(ReceiptRefused, match="does not trust"):
        verify_receipt(done["receipt"], trusted_keys([forged_verifier], "test"), service="billing", token=token)
