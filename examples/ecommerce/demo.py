"""The checkout on Temporal, importable from a checkout of this repository as seed 002 writes it.

    import asyncio
    from examples.ecommerce.demo import run_scenario
    run = asyncio.run(run_scenario("business-failure"))
    print(" -> ".join(run.proposals), run.state.status.value)

The checkout itself lives in ``agent_saga_temporal.examples.ecommerce`` (installed with
``agent-saga-temporal``); this module only gives it the path a reader of the seed types,
from the repository's root. It needs ``agent-saga-temporal[dev-server]`` (or
``$TEMPORAL_ADDRESS``): without a server address it starts a local one.
"""

from agent_saga_temporal.examples.ecommerce.run import SCENARIOS, CheckoutRun, RunState, run_scenario

__all__ = ["SCENARIOS", "CheckoutRun", "RunState", "run_scenario"]
