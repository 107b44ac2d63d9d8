"""The "world" of the service tests: charges are files, so every process sees the same ones.

A charge is ``$SERVICE_WORLD/charges/<id>``; the refund, registered by name so the
recovery daemon can run it in another process, removes it. Tests judge what happened
by these files, not by what the engine says.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agent_saga import Compensation, compensator


def charges() -> Path:
    path = Path(os.environ["SERVICE_WORLD"]) / "charges"
    path.mkdir(parents=True, exist_ok=True)
    return path


def charge(order: str, wait: float = 0.0) -> dict[str, str]:
    time.sleep(wait)
    (charges() / order).write_text(order)
    return {"id": order}


@compensator("world.refund")
def refund(charge_id: str) -> None:
    (charges() / charge_id).unlink(missing_ok=True)


def refund_of(result: dict[str, Any]) -> Compensation:
    return Compensation(fn=refund, handler="world.refund", kwargs={"charge_id": result["id"]})


def standing() -> set[str]:
    return {p.name for p in charges().iterdir()}
