"""DBOS's side of bench_resume_dbos.py: run under a python with `dbos` installed (its own venv).

    python dbos_recovery.py crash PG_URL WORKFLOW_ID EXECUTOR STEPS AFTER
    python dbos_recovery.py recover PG_URL WORKFLOW_ID EXECUTOR STEPS AFTER

``crash`` starts workflow WORKFLOW_ID (STEPS ``@DBOS.step`` calls, each checkpointed in Postgres
before the next starts) under executor id EXECUTOR and SIGKILLs its own process right after step
AFTER returns: the workflow is left PENDING. ``recover`` launches DBOS under another executor id
(so its launch recovers nothing), then times ``DBOS._recover_pending_workflows([EXECUTOR])`` and
the recovered workflow's ``get_result()``; prints one JSON line (``calls``: each step call's
wall and calling thread's CPU seconds, in order).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid

from dbos import DBOS, SetWorkflowID

mode, url, workflow_id, executor = sys.argv[1:5]
steps = int(sys.argv[5])
crash_after = int(sys.argv[6]) if mode == "crash" else -1  # recover: the parent splits served from live
DBOS(config={"name": "bench-recovery", "system_database_url": f"{url.rsplit('/', 1)[0]}/dbos_bench_sys",
             "log_level": "WARNING",
             "executor_id": executor if mode == "crash" else f"recoverer-{uuid.uuid4().hex[:8]}"})
calls: list[tuple[float, float]] = []  # (wall, calling thread's CPU) of each step call, in order
entered: list[float] = []  # when the workflow's body started and returned


@DBOS.step()
def think(i: int) -> str:
    return f"thought {i}"


@DBOS.workflow()
def thinker(n: int) -> int:
    entered.append(time.perf_counter())
    for i in range(n):
        wall, cpu = time.perf_counter(), time.thread_time()
        think(i)
        calls.append((time.perf_counter() - wall, time.thread_time() - cpu))
        if i + 1 == crash_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash: no clean-up, the workflow stays PENDING
    entered.append(time.perf_counter())
    return n


launched_wall, launched_cpu = time.perf_counter(), time.process_time()
DBOS.launch()
launch = (time.perf_counter() - launched_wall, time.process_time() - launched_cpu)
if mode == "crash":
    with SetWorkflowID(workflow_id):
        thinker(steps)
    sys.exit(f"workflow {workflow_id} finished: it should have been killed after step {crash_after}")
wall, cpu = time.perf_counter(), time.process_time()
handles = DBOS._recover_pending_workflows([executor])
assert [h.get_workflow_id() for h in handles] == [workflow_id], [h.get_workflow_id() for h in handles]
assert handles[0].get_result() == steps
recover = (time.perf_counter() - wall, time.process_time() - cpu)
DBOS.destroy()
print(json.dumps({
    "launch_wall_ms": launch[0] * 1e3, "launch_cpu_ms": launch[1] * 1e3,
    "wall_ms": recover[0] * 1e3, "cpu_ms": recover[1] * 1e3,
    "to_body_ms": (entered[0] - wall) * 1e3, "body_ms": (entered[1] - entered[0]) * 1e3, "calls": calls,
}))
