"""The onboarding world of the repair tests: a CRM account, a Stripe charge, an address.

Every effect and every undo is a line in $REPAIR_WORLD/world.jsonl (shared by the test,
its worker processes and a daemon), deduplicated by idempotency key as a real provider
does: a second call with a key already applied is recorded as "deduped", never applied
twice. Tests assert on this file: it is what the outside world saw.

``python repair_world.py WAL`` is the worker the kill tests SIGKILL: it creates the
account, charges it, writes "ready" into the world and waits to be killed before step 3.
``python repair_world.py WAL SWITCH`` is quarantined through the switch store SWITCH
after step 2 instead: step 3 freezes the saga, and the worker writes "ready" and lives on.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from agent_saga import Compensation, FileWAL, NotApplied, Saga, compensator, saga_scope
from agent_saga.registry import unregister

__all__ = ["HANDLERS", "clear_address", "delete_account", "entries", "onboard", "refund", "register", "undone"]

_POSTCODE = re.compile(r"^[A-Z]{1,2}[0-9][A-Z0-9]? [0-9][A-Z]{2}$")


def _file() -> Path:
    return Path(os.environ["REPAIR_WORLD"]) / "world.jsonl"


def entries() -> list[dict[str, Any]]:
    path = _file()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def undone(op: str) -> list[str]:
    """The refs ``op`` (an undo) actually applied, in order."""
    return [e["ref"] for e in entries() if e["ev"] == "applied" and e["op"] == op]


def _effect(op: str, ref: str, key: str | None) -> None:
    if not key:
        raise ValueError(f"{op}({ref!r}) needs an idempotency_key")
    path = _file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        seen = [json.loads(line) for line in os.pread(fd, os.fstat(fd).st_size, 0).splitlines() if line.strip()]
        ev = "deduped" if any(e["ev"] == "applied" and e["key"] == key for e in seen) else "applied"
        os.write(fd, (json.dumps({"ev": ev, "op": op, "ref": ref, "key": key, "pid": os.getpid()}) + "\n").encode())
    finally:
        os.close(fd)


def create_account(email: str, idempotency_key: str | None = None) -> dict[str, str]:
    _effect("crm.create_account", email, idempotency_key)
    return {"account_id": f"acct-{email}"}


def delete_account(account_id: str, idempotency_key: str | None = None) -> None:
    _effect("crm.delete_account", account_id, idempotency_key)


def charge(account_id: str, amount: int, idempotency_key: str | None = None) -> dict[str, str]:
    _effect("stripe.charge", account_id, idempotency_key)
    return {"charge_id": f"ch-{account_id}-{amount}"}


def refund(charge_id: str, idempotency_key: str | None = None) -> None:
    _effect("stripe.refund", charge_id, idempotency_key)


def set_address(account_id: str, postcode: str, idempotency_key: str | None = None) -> dict[str, str]:
    if not _POSTCODE.match(postcode):
        # Refused before anything happened: the engine records the step NOT_APPLIED.
        raise NotApplied(f"malformed postcode {postcode!r}")
    _effect("crm.set_address", account_id, idempotency_key)
    return {"account_id": account_id}


def clear_address(account_id: str, idempotency_key: str | None = None) -> None:
    _effect("crm.clear_address", account_id, idempotency_key)


HANDLERS = {"crm.delete_account": delete_account, "stripe.refund": refund, "crm.clear_address": clear_address}


def register() -> None:
    """Register the undo handlers (a fixture's job: other tests register other "stripe.refund"s)."""
    for name, fn in HANDLERS.items():
        compensator(name)(fn)


def unregister_all() -> None:
    for name in HANDLERS:
        unregister(name)


async def account_and_charge(saga: Saga, email: str = "ada@example.com") -> str:
    """Steps 1 and 2 of the onboarding; the account id."""
    account = await saga.execute(
        tool="crm.create_account", semantics="COMPENSABLE", args={"email": email},
        forward=lambda idempotency_key: create_account(email, idempotency_key),
        compensate=lambda r: Compensation(handler="crm.delete_account", kwargs={"account_id": r["account_id"]}),
    )
    account_id: str = account["account_id"]
    await saga.execute(
        tool="stripe.charge", semantics="COMPENSABLE", args={"account_id": account_id, "amount": 4200},
        forward=lambda idempotency_key: charge(account_id, 4200, idempotency_key),
        compensate=lambda r: Compensation(handler="stripe.refund", kwargs={"charge_id": r["charge_id"]}),
    )
    return account_id


async def address(saga: Saga, account_id: str, postcode: str) -> None:
    """Step 3: the one the model's malformed postcode fails."""
    await saga.execute(
        tool="crm.set_address", semantics="COMPENSABLE", args={"account_id": account_id, "postcode": postcode},
        forward=lambda idempotency_key: set_address(account_id, postcode, idempotency_key),
        compensate=Compensation(handler="crm.clear_address", kwargs={"account_id": account_id}),
    )


async def onboard(saga: Saga, amendments: dict[str, Any]) -> str:
    """A continuation: step 3 again, with the operator's postcode."""
    await address(saga, "acct-ada@example.com", amendments["postcode"])
    return "onboarded"


def _worker(wal_path: str) -> None:
    import asyncio

    register()

    async def quarantined(switch_path: str) -> None:
        from agent_saga import KillSwitch, PreFlightGate, SagaQuarantined
        from agent_saga.gate import FileSwitchStore

        wal = FileWAL(wal_path)
        switch = KillSwitch(FileSwitchStore(switch_path), poll_interval=0, wal=wal)
        try:
            async with saga_scope(wal, gate=PreFlightGate([], switch=switch), name="onboarding") as saga:
                await account_and_charge(saga)
                switch.quarantine(saga.saga_id, reason="odd postcodes", by="soc@example.com")
                await address(saga, "acct-ada@example.com", "SW1A1AA")
        except SagaQuarantined:
            wal.barrier()
            (_file().parent / "ready").write_text(saga.saga_id)
            time.sleep(3600)  # alive, and its saga frozen

    async def run() -> None:
        async with saga_scope(FileWAL(wal_path), name="onboarding") as saga:
            await account_and_charge(saga)
            # The charge's commit is made durable by the next step's intent or the saga's
            # end, and this process dies before either: wait for it, or the kill can land
            # first and leave the charge in flight (which repair rightly refuses).
            saga.wal.barrier()
            (_file().parent / "ready").write_text(saga.saga_id)
            time.sleep(3600)  # killed here, before step 3

    asyncio.run(quarantined(sys.argv[2]) if len(sys.argv) > 2 else run())


if __name__ == "__main__":
    _worker(sys.argv[1])
