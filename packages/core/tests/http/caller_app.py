"""Service A of the HTTP tests: an agent service whose saga charges through service B (billing)."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException

from agent_saga import SagaAborted, saga_lifespan, saga_scope
from agent_saga.distributed import SagaTransport, trust_service
from agent_saga.engine.reconcile_policy import ReconcilePolicy

BILLING = os.environ["BILLING_URL"]
trust_service("billing", BILLING, [os.environ["BILLING_VERIFIER"]])

app = FastAPI(lifespan=saga_lifespan(os.environ["CALLER_WAL"], handlers=["caller_app"], interval=0.2,
                                     lease_grace=0.2))
# Patient questions: the service-killed test restarts billing while the engine asks.
http = httpx.Client(transport=SagaTransport(
    reconcile=ReconcilePolicy(delay=0.2, attempts=3, timeout=60.0), wait_for_commit=True,
), timeout=60.0)


@app.post("/orders/{order}")
def order(order: str, fail: int = 0, die: int = 0, billing_dies: int = 0) -> dict[str, Any]:
    try:
        with saga_scope(name="order", tags={f"order:{order}"}) as saga:
            answer = http.post(f"{BILLING}/charges/{order}" + ("?die=1" if billing_dies else ""))
            if die:
                print(saga.saga_id, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if fail:
                raise RuntimeError("shipping failed after the charge")
    except SagaAborted as aborted:
        raise HTTPException(409, {"saga": saga.saga_id, "clean": aborted.report.clean}) from None
    return {"saga": saga.saga_id, "status": answer.status_code, "billing": answer.json()}
