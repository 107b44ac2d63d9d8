"""DBOS's durable step, measured like bench_fleet.py measures ours (run in a venv with `dbos`).

usage: python bench_dbos_step.py PG_URL CONCURRENCY TOTAL_STEPS STEPS_PER_WORKFLOW
Each workflow runs STEPS_PER_WORKFLOW @DBOS.step calls (each checkpointed in Postgres before
the next starts); CONCURRENCY threads run workflows. Prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import uuid

from dbos import DBOS

url, concurrency, total, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
base = url.rsplit("/", 1)[0]
DBOS(config={"name": "bench", "system_database_url": f"{base}/dbos_bench_sys", "log_level": "WARNING",
             "max_executor_threads": max(64, concurrency * 2)})
latencies: list[float] = []
lock = threading.Lock()


@DBOS.step()
def step() -> int:
    return 1


@DBOS.workflow()
def workflow(n: int) -> None:
    for _ in range(n):
        started = time.perf_counter()
        step()
        with lock:
            latencies.append(time.perf_counter() - started)


DBOS.launch()
workflows = max(1, total // per)
todo = list(range(workflows))


def worker() -> None:
    while True:
        with lock:
            if not todo:
                return
            todo.pop()
        workflow(per)


threads = [threading.Thread(target=worker) for _ in range(concurrency)]
started = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.perf_counter() - started
DBOS.destroy()
latencies.sort()
print(json.dumps({
    "steps_per_s": len(latencies) / elapsed,
    "p50_ms": statistics.median(latencies) * 1000,
    "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    "run": uuid.uuid4().hex[:6],
}))
