"""Service B of the HTTP tests: a billing service whose charges are steps of its callers' sagas.

Its world is a directory: ``charges/<order>`` while a charge stands, and ``effects.log``
with one line per effect (``charge <order>``, ``refund <order>``), so a test counts effects.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from agent_saga import compensator, saga_lifespan
from agent_saga.distributed import SagaContextMiddleware, remote_step

WORLD = Path(os.environ["BILLING_WORLD"])


def _effect(line: str) -> None:
    with open(WORLD / "effects.log", "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


@compensator("billing.refund")
def refund(order: str, idempotency_key: str) -> None:
    (WORLD / "charges" / order).unlink(missing_ok=True)
    _effect(f"refund {order} {idempotency_key}")


app = FastAPI(lifespan=saga_lifespan(os.environ["BILLING_WAL"], handlers=["billing_app"], interval=0.2,
                                     lease_grace=0.2))


@app.post("/charges/{order}")
def charge(order: str) -> dict[str, Any]:
    (WORLD / "charges").mkdir(parents=True, exist_ok=True)
    (WORLD / "charges" / order).write_text("charged")
    _effect(f"charge {order}")
    remote_step().compensate_with("billing.refund", order=order)
    return {"charge": order}


class DieBeforeAnswering:
    """``?die=1``: the work is done and in the ledger, then the process dies before the answer leaves."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and b"die=1" in scope.get("query_string", b""):
            async def dying(message: Any) -> None:
                if message["type"] == "http.response.start":
                    os.kill(os.getpid(), signal.SIGKILL)
                await send(message)

            await self.app(scope, receive, dying)
            return
        await self.app(scope, receive, send)


app.add_middleware(SagaContextMiddleware, service="billing", signer_key=os.environ["BILLING_SIGNER"],
                   ledger=os.environ["BILLING_LEDGER"])
app.add_middleware(DieBeforeAnswering)  # added last: outermost
