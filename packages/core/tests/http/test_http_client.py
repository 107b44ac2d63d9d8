"""The caller's transport against httpx's MockTransport: what is sent where, and what it believes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent_saga import SagaAborted, saga_scope
from agent_saga.distributed import (
    SagaContext,
    SagaTransport,
    forget_services,
    parse_saga_context,
    sign_token,
    trust_service,
)
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import MemoryWAL
from agent_saga.notekeys import generate_signer

SIGNER, VERIFIER = generate_signer("billing.test/tokens", "http")


@pytest.fixture(autouse=True)
def billing() -> Iterator[None]:
    trust_service("billing", "http://billing.test:8001/api", [VERIFIER])
    yield
    forget_services()


class Recorder:
    def __init__(self, signer: str = SIGNER) -> None:
        self.seen: list[httpx.Request] = []
        self.signer = signer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        value = request.headers.get("saga-context")
        if value is None:
            return httpx.Response(200, json={"plain": True})
        context = parse_saga_context(value)
        token = sign_token(self.signer, "billing", context, "billing.refund", {"order": "o-1"})
        return httpx.Response(200, json={"charge": "o-1"}, headers={"saga-compensation": token})


def test_the_context_goes_only_to_a_trusted_service_and_only_inside_a_saga() -> None:
    recorder = Recorder()
    http = httpx.Client(transport=SagaTransport(httpx.MockTransport(recorder)))
    http.get("http://billing.test:8001/api/charges")  # no saga: untouched
    wal = MemoryWAL()
    with saga_scope(wal) as saga:
        http.get("http://elsewhere.test/api/charges")  # not the trusted origin
        http.get("http://billing.test:8002/api/charges")  # another port
        http.get("http://billing.test:8001/apix")  # not under the base path
        answer = http.post("http://billing.test:8001/api/charges", json={"order": "o-1"})
    assert [("saga-context" in r.headers) for r in recorder.seen] == [False, False, False, False, True]
    context = parse_saga_context(recorder.seen[-1].headers["saga-context"])
    (step,) = saga.steps
    assert (context.saga, context.step, context.key) == (saga.saga_id, 1, step.operation_id)
    assert answer.json() == {"charge": "o-1"} and answer.headers["saga-compensation"].startswith("v1.")
    committed = [r for r in wal.records() if r["type"] == "STEP_COMMITTED"]
    assert committed[0]["body"]["compensation"]["kwargs"]["service"] == "billing"


def test_a_token_signed_by_a_key_the_caller_does_not_trust_is_refused_and_recorded() -> None:
    attacker, _ = generate_signer("billing.test/tokens", "http")
    http = httpx.Client(transport=SagaTransport(httpx.MockTransport(Recorder(attacker))))
    wal = MemoryWAL()
    with pytest.raises(SagaAborted), saga_scope(wal):
        http.post("http://billing.test:8001/api/charges")
    records: list[dict[str, Any]] = list(wal.records())
    committed = next(r for r in records if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["compensation"] is None
    assert "compensation token refused: it is signed by a key this side does not trust" in committed["body"]["problem"]
    assert [r["type"] for r in records][-2:] == ["STEP_ORPHANED", "SAGA_ROLLED_BACK"]  # the effect stands


def test_a_token_for_another_step_is_refused() -> None:
    def replay(request: httpx.Request) -> httpx.Response:
        other = SagaContext("ab" * 16, 1, "ee" * 16)  # a token the service issued for another key
        token = sign_token(SIGNER, "billing", other, "billing.refund", {"order": "o-1"})
        return httpx.Response(200, json={}, headers={"saga-compensation": token})

    http = httpx.Client(transport=SagaTransport(httpx.MockTransport(replay)))
    wal = MemoryWAL()
    with pytest.raises(SagaAborted), saga_scope(wal):
        http.post("http://billing.test:8001/api/charges")
    committed = next(r for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert "for another step's key" in committed["body"]["problem"]


def test_a_header_set_by_hand_is_refused() -> None:
    http = httpx.Client(transport=SagaTransport(httpx.MockTransport(Recorder())))
    with pytest.raises(ConfigurationError, match="the transport sets it"):
        http.get("http://billing.test:8001/api/x", headers={"saga-context": "00-" + "a" * 74})


@pytest.mark.parametrize(("args", "why"), [
    (("bad name", "http://x.test", [VERIFIER]), "the name must be"),
    (("billing", "ftp://x.test", [VERIFIER]), "base_url must be"),
    (("billing", "http://x.test/?q=1", [VERIFIER]), "base_url must be"),
    (("billing", "http://x.test", []), "at least one verifier key"),
    (("billing", "http://x.test", ["not a key"]), "not a verifier key"),
])
def test_trusting_a_service_refuses_bad_input_in_one_line(args: tuple[Any, ...], why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        trust_service(*args)


async def test_the_async_transport_makes_the_same_step() -> None:
    from agent_saga.distributed import AsyncSagaTransport

    recorder = Recorder()

    async def handler(request: httpx.Request) -> httpx.Response:
        return recorder(request)

    wal = MemoryWAL()
    async with httpx.AsyncClient(transport=AsyncSagaTransport(httpx.MockTransport(handler))) as http:
        async with saga_scope(wal) as saga:
            answer = await http.post("http://billing.test:8001/api/charges")
    assert answer.json() == {"charge": "o-1"}
    context = parse_saga_context(recorder.seen[-1].headers["saga-context"])
    assert context.key == saga.steps[0].operation_id
    committed = next(r for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["compensation"]["handler"] == "agent_saga.http.compensate"
