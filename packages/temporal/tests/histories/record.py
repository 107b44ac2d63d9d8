"""Record the histories test_replay.py replays: ``python packages/temporal/tests/histories/record.py``.

Run it (with the temporal tox env's python) only when a change to the workflow is
*meant* to change what it commands, and say so in the commit: jobs already running
on a server were started by the old code, and their histories are what the new
code must still replay. A workflow change that breaks these by accident is the bug
the replay test exists to catch.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from agent_saga_temporal import DevServer, settled  # noqa: E402
from agent_saga_temporal.examples.ecommerce import steps  # noqa: E402
from agent_saga_temporal.examples.ecommerce.run import SCRIPT  # noqa: E402
from conftest import open_order, start, worker  # noqa: E402

FORGED = ["charge_payment", *SCRIPT]  # a step not allowed yet, refused, then the checkout


async def record(address: str) -> None:
    cases = {"happy": SCRIPT, "business-failure": SCRIPT, "lost-response": SCRIPT,
             "refund-fails": SCRIPT, "refused-proposal": FORGED}
    for name, script in cases.items():
        order_id = open_order(steps.provider(), "happy" if name == "refused-proposal" else name)
        async with worker(address, script) as (client, queue):
            handle = await start(client, queue, order_id)
            report = await settled(handle)
            history = await handle.fetch_history()
        compact = json.dumps(history.to_json_dict(), separators=(",", ":"), sort_keys=True)
        (HERE / f"{name}.json").write_text(compact + "\n")
        print(f"{name}: {report.status}, {len(history.events)} events")


if __name__ == "__main__":
    import os

    with tempfile.TemporaryDirectory() as state, DevServer() as server:
        os.environ[steps.STATE] = state
        asyncio.run(record(server.address))
