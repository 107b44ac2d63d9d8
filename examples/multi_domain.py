"""Five systems, one transaction, no network: a failure at the last one unwinds the other four.

    python examples/multi_domain.py

Payments, a CRM, a ticket tracker, cloud infrastructure and a messaging gateway, each a
small local fake with real state (what exists in it, and the idempotency keys it has seen,
so a retried call changes nothing twice). No connector is involved: each undo is an
ordinary function registered with ``@compensator``, which is all the engine needs.

The agent onboards a customer across all five. The messaging gateway refuses the welcome
SMS (the number is not a mobile line), so the four finished steps are undone newest
first: the server is deleted, the ticket closed, the CRM account removed, the charge
refunded. The script prints the rollback report, what each system holds afterwards, and
where the log is (``./multi_domain.wal``, replaced on each run; check it with
``agent-saga verify --wal ./multi_domain.wal``).
"""

from __future__ import annotations

import asyncio
import shutil
from functools import partial
from pathlib import Path
from typing import Any

from agent_saga import (
    ActionSemantics,
    Compensation,
    FileWAL,
    NotApplied,
    SagaAborted,
    compensator,
    saga_scope,
)

C = ActionSemantics.COMPENSABLE
LOG = Path("multi_domain.wal")


class System:
    """One outside system: the things it holds, and the idempotency keys it has applied."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: dict[str, dict[str, Any]] = {}
        self.keys: set[str] = set()
        self.counter = 0
        self.history: list[str] = []  # what happened in it, in order

    def _once(self, key: str | None) -> bool:
        if key is not None and key in self.keys:
            return False  # a retry of a call already applied: nothing changes
        if key is not None:
            self.keys.add(key)
        return True

    def create(self, prefix: str, key: str | None, **fields: Any) -> dict[str, Any]:
        if not self._once(key):
            return next(dict(item) for item in self.items.values() if item["key"] == key)
        self.counter += 1
        item = {"id": f"{prefix}_{self.counter}", "key": key, **fields}
        self.items[item["id"]] = item
        self.history.append(f"+{item['id']}")
        return dict(item)

    def remove(self, item_id: str, key: str | None) -> None:
        if self._once(key) and self.items.pop(item_id, None) is not None:
            self.history.append(f"-{item_id}")


payments, crm, tickets, infra, messages = (System(n) for n in ("payments", "crm", "tickets", "infra", "messages"))
SYSTEMS = (payments, crm, tickets, infra, messages)


# -- the tools (forward calls) -----------------------------------------------------------------

def charge(amount: int, idempotency_key: str | None = None) -> dict[str, Any]:
    return payments.create("ch", idempotency_key, amount=amount)


def create_account(company: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return crm.create("acct", idempotency_key, company=company)


def open_ticket(title: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return tickets.create("ONB", idempotency_key, title=title)


def create_server(size: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return infra.create("i", idempotency_key, size=size)


def send_sms(to: str, text: str, idempotency_key: str | None = None) -> dict[str, Any]:
    # The gateway validated the number and refused it: nothing was sent, so say so with
    # NotApplied (any other exception would leave the step UNKNOWN: it might have gone out).
    messages.history.append("refused")
    raise NotApplied(f"{to} is a landline: the gateway sends no SMS to it")


# -- their undos, by name (a recovery daemon in another process could run them) ------------

@compensator("payments.refund")
def refund(charge_id: str, idempotency_key: str | None = None) -> None:
    payments.remove(charge_id, idempotency_key)


@compensator("crm.delete_account")
def delete_account(account_id: str, idempotency_key: str | None = None) -> None:
    crm.remove(account_id, idempotency_key)


@compensator("tickets.close")
def close_ticket(ticket_id: str, idempotency_key: str | None = None) -> None:
    tickets.remove(ticket_id, idempotency_key)


@compensator("infra.delete_server")
def delete_server(server_id: str, idempotency_key: str | None = None) -> None:
    infra.remove(server_id, idempotency_key)


def undo(fn: Any, handler: str, param: str) -> Any:
    """The undo of a step, derived from the step's actual result (its id)."""
    return lambda r: Compensation(fn=fn, handler=handler, kwargs={param: r["id"]}, description=f"{handler} {r['id']}")


async def onboard(company: str) -> None:
    async with saga_scope(FileWAL(LOG), name=f"onboard {company}") as saga:
        steps = [
            # partial(...) keeps the tool's idempotency_key parameter visible: the engine fills it
            ("payments.charge", partial(charge, 4200), undo(refund, "payments.refund", "charge_id")),
            ("crm.create_account", partial(create_account, company),
             undo(delete_account, "crm.delete_account", "account_id")),
            ("tickets.open", partial(open_ticket, f"onboard {company}"), undo(close_ticket, "tickets.close", "ticket_id")),
            ("infra.create_server", partial(create_server, "m6i.large"),
             undo(delete_server, "infra.delete_server", "server_id")),
        ]
        for tool, forward, compensate in steps:
            result = await saga.execute(tool=tool, semantics=C, forward=forward, compensate=compensate)
            print(f"  -> {tool:<22} {result['id']}")
        await saga.execute(tool="messages.send_sms", semantics=ActionSemantics.IRREVERSIBLE,
                           forward=partial(send_sms, "+44 20 7946 0000", f"welcome, {company}"))


def main() -> int:
    LOG.unlink(missing_ok=True)  # this example's own log: a fresh one each run
    shutil.rmtree(f"{LOG}.recovery", ignore_errors=True)
    print("onboarding acme across payments, crm, tickets, infra and messages (all local):")
    clean = False
    try:
        asyncio.run(onboard("acme"))
    except SagaAborted as aborted:
        print("  -> messages.send_sms      FAILED (refused by the gateway: nothing sent)")
        print()
        print(aborted.report.format_text())
        clean = aborted.report.clean
    print()
    print("what each system holds now (and what happened in it):")
    for system in SYSTEMS:
        print(f"  {system.name:<9} {', '.join(sorted(system.items)) or 'nothing':<8} "
              f"({' '.join(system.history) or 'never called'})")
    left = [item for system in SYSTEMS for item in system.items]
    print(f"left standing: {left or 'nothing'}")
    print(f"log: {LOG.absolute()}  (check it: agent-saga verify --wal ./{LOG})")
    return 0 if clean and not left else 1


if __name__ == "__main__":
    raise SystemExit(main())
