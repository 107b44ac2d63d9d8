"""The 30-second example: three systems, one transaction, a failure, a clean unwind.

    python examples/quickstart.py

Everything is local and simulated; the engine, the write-ahead log and the
compensations are real. The log lands in ./agent-saga.wal.
"""

from __future__ import annotations

import asyncio

from agent_saga import ActionSemantics, Compensation, NotApplied, SagaAborted, compensator, saga_scope

C = ActionSemantics.COMPENSABLE
ledger: dict[str, str] = {}  # what exists in the "outside world"


async def charge_card(amount: int) -> dict[str, str]:
    ledger["ch_1"] = f"charged {amount}"
    return {"id": "ch_1"}


@compensator("payments.refund")  # a named undo: a recovery daemon can run it after a crash
def refund(charge_id: str, idempotency_key: str | None = None) -> None:
    ledger[charge_id] = "refunded"


async def create_server(size: str) -> dict[str, str]:
    ledger["srv_9"] = f"running ({size})"
    return {"server_id": "srv_9"}


@compensator("cloud.delete_server")
def delete_server(server_id: str, idempotency_key: str | None = None) -> None:
    ledger[server_id] = "deleted"


async def create_dns_record(name: str) -> dict[str, str]:
    # The DNS API rejected the request, so nothing changed: say so with NotApplied.
    # (Any other exception would leave the step UNKNOWN: it might have landed.)
    raise NotApplied(f"no zone for {name}")


@compensator("dns.delete_record")
def delete_record(record_id: str, idempotency_key: str | None = None) -> None:
    ledger.pop(record_id, None)


async def main() -> None:
    try:
        async with saga_scope() as saga:
            await saga.execute(
                tool="payments.charge", semantics=C, forward=lambda: charge_card(4200),
                compensate=lambda r: Compensation(fn=refund, handler="payments.refund",
                                                  kwargs={"charge_id": r["id"]}))
            await saga.execute(
                tool="cloud.create_server", semantics=C, forward=lambda: create_server("m6i.large"),
                compensate=lambda r: Compensation(fn=delete_server, handler="cloud.delete_server",
                                                  kwargs={"server_id": r["server_id"]}))
            await saga.execute(
                tool="dns.create_record", semantics=C, forward=lambda: create_dns_record("acme.example"),
                compensate=lambda r: Compensation(fn=delete_record, handler="dns.delete_record",
                                                  kwargs={"record_id": r["id"]}))
    except SagaAborted as aborted:
        print(aborted.report.format_text())
    print("world:", ledger)


if __name__ == "__main__":
    asyncio.run(main())
