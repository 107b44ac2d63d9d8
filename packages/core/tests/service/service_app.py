"""A FastAPI app on saga_lifespan, served by a real uvicorn process in test_service_lifespan."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import FastAPI, HTTPException
from service_world import charge, refund_of

from agent_saga import NotApplied, SagaAborted, configure_logging, saga, saga_lifespan, saga_scope, tool

configure_logging()  # the library's lines, with saga and step ids, to stderr

app = FastAPI(lifespan=saga_lifespan(
    os.environ["SERVICE_APP_WAL"], handlers=["service_world"], interval=0.2, lease_grace=0.2,
    drain_timeout=float(os.environ.get("SERVICE_APP_DRAIN", "30")),
))
background: set[asyncio.Task[Any]] = set()


@tool(semantics="COMPENSABLE", compensate=refund_of)
async def take_payment(order: str) -> dict[str, str]:
    return charge(order)


@tool(semantics="IRREVERSIBLE")
async def book_shipping(order: str) -> str:
    if order.startswith("fail-"):
        raise NotApplied("the carrier refused the booking")  # it knows nothing was booked
    return f"shipment of {order}"


@app.post("/checkout/{order}")
async def checkout(order: str) -> dict[str, Any]:
    @saga  # the seed's shape: a saga declared inside the route, on the default log
    async def process_payment() -> str:
        await take_payment(order)
        return await book_shipping(order)

    try:
        return {"shipment": await process_payment()}
    except SagaAborted as aborted:
        raise HTTPException(409, {"clean": aborted.report.clean}) from None


@app.post("/scoped/{order}")
async def scoped(order: str) -> dict[str, str]:
    async with saga_scope(name="scoped") as s:
        return await s.execute(tool="payments.charge", semantics="COMPENSABLE",  # type: ignore[no-any-return]
                               forward=lambda: charge(order), compensate=refund_of)


@app.post("/blocking/{order}")
def blocking(order: str) -> dict[str, str]:
    with saga_scope(name="blocking") as s:
        return s.execute(tool="payments.charge", semantics="COMPENSABLE",  # type: ignore[no-any-return]
                         forward=lambda: charge(order), compensate=refund_of)


@app.post("/background/{order}", status_code=202)
async def later(order: str, wait: float) -> dict[str, str]:
    async def run() -> None:
        async with saga_scope(name="background") as s:
            await s.execute(tool="payments.charge", semantics="COMPENSABLE",
                            forward=lambda: charge(order, wait), compensate=refund_of)

    task = asyncio.create_task(run())
    background.add(task)
    task.add_done_callback(background.discard)
    return {"accepted": order}
