"""Predictive pre-execution, measured: a scripted agent with and without a Speculator.

    python bench/bench_speculation.py [--think 50 150] [--repeat 3] [--json]

The agent's script (one saga per run): read pages 1-8 of a report (the pattern the shipped
PatternPredictor follows), one search (nothing predicts it), pages 1-4 of a second report,
then one model response that plans three lookups at once (fed through ``planned_calls``, as an
adapter does with a response's parallel tool calls; the framework then runs them one by one).
Before every call the agent "thinks" (its model answering) for ``--think`` milliseconds.
Every tool is REVERSIBLE and sleeps a fixed latency between 20 and 200 ms (drawn once per
call from a seeded generator, the same in both runs). Reported per think time, off and on:
end-to-end seconds, calls the agent made, tool executions (real + speculative), speculations
started, redeemed and wasted, and the time saved.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "core" / "src"))

from agent_saga import MemoryWAL, PatternPredictor, Speculator, planned_calls, saga_scope, tool

_PAGES_A, _PAGES_B = 8, 4


class Tools:
    """Three REVERSIBLE tools with a fixed latency per (tool, arguments) and a count of executions."""

    def __init__(self, seed: int = 30) -> None:
        rng = random.Random(seed)
        self._latency: dict[tuple[str, str], float] = {}
        self._rng = rng
        self._lock = threading.Lock()
        self.executions = 0

        @tool(semantics="REVERSIBLE")
        def read_page(doc: str, page: int) -> str:
            self._work("read_page", f"{doc}:{page}")
            pages = _PAGES_A if doc == "report-a" else _PAGES_B
            return f"{doc} page {page}" if 1 <= page <= pages else ""

        @tool(semantics="REVERSIBLE")
        def search(query: str) -> list[str]:
            self._work("search", query)
            return [f"hit for {query}"]

        @tool(semantics="REVERSIBLE")
        def lookup(customer: int) -> dict[str, int]:
            self._work("lookup", str(customer))
            return {"customer": customer}

        self.read_page, self.search, self.lookup = read_page, search, lookup

    def latency(self, name: str, key: str) -> float:
        with self._lock:
            if (name, key) not in self._latency:
                self._latency[(name, key)] = self._rng.uniform(0.020, 0.200)
            return self._latency[(name, key)]

    def _work(self, name: str, key: str) -> None:
        with self._lock:
            self.executions += 1
        time.sleep(self.latency(name, key))


def _script(tools: Tools, think: float) -> int:
    """The agent: think, call, think, call ...; returns how many calls it made."""
    made = 0

    def step(call: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        time.sleep(think)  # the model answering
        call(*args, **kwargs)
        made += 1

    for page in range(1, _PAGES_A + 1):
        step(tools.read_page, "report-a", page)
    step(tools.search, "late invoices")
    for page in range(1, _PAGES_B + 1):
        step(tools.read_page, "report-b", page)
    time.sleep(think)  # one response, three planned lookups
    planned = [("lookup", {"customer": c}) for c in (11, 12, 13)]
    planned_calls(planned)  # a no-op without a Speculator
    for _, args in planned:
        tools.lookup(**args)
        made += 1
    return made


def run(think_ms: float, speculate: bool) -> dict[str, Any]:
    tools = Tools()
    # warm the latency table in a fixed order, so that both runs draw the same latencies
    for page in range(1, _PAGES_A + 2):
        tools.latency("read_page", f"report-a:{page}")
    tools.latency("search", "late invoices")
    for page in range(1, _PAGES_B + 2):
        tools.latency("read_page", f"report-b:{page}")
    for c in (11, 12, 13):
        tools.latency("lookup", str(c))
    stats = None
    start = time.perf_counter()
    with saga_scope(wal=MemoryWAL(), name="bench-speculation"):
        if speculate:
            with Speculator([tools.read_page, tools.search, tools.lookup], intent="bench",
                            predictor=PatternPredictor(), workers=4) as spec:
                made = _script(tools, think_ms / 1000)
            stats = spec.stats
        else:
            made = _script(tools, think_ms / 1000)
    elapsed = time.perf_counter() - start
    return {
        "think_ms": think_ms, "speculation": speculate, "seconds": round(elapsed, 3), "calls": made,
        "executions": tools.executions,
        "started": stats.started if stats else 0, "redeemed": stats.redeemed if stats else 0,
        "wasted": stats.wasted if stats else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--think", type=float, nargs="+", default=[50.0, 150.0], help="model think times, ms")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the median run is reported")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dir", help="accepted like the other benchmarks; this one writes no files (MemoryWAL)")
    options = parser.parse_args()
    rows = []
    for think in options.think:
        offs, ons = [], []
        for _ in range(options.repeat):  # interleaved, so that a busy moment hits both alike
            offs.append(run(think, False))
            ons.append(run(think, True))
        off, on = (sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2] for runs in (offs, ons))
        on["saved"] = round(off["seconds"] - on["seconds"], 3)
        on["saved_pct"] = round(100 * on["saved"] / off["seconds"], 1)
        rows += [off, on]
    if options.json:
        print(json.dumps(rows, indent=2))
        return
    print("| think | speculation | end to end | agent calls | tool executions | speculated | redeemed | wasted | saved |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        saved = f"{r['saved']:.2f} s ({r['saved_pct']:.0f}%)" if r["speculation"] else "-"
        print(f"| {r['think_ms']:.0f} ms | {'on' if r['speculation'] else 'off'} | {r['seconds']:.2f} s | {r['calls']} | "
              f"{r['executions']} | {r['started']} | {r['redeemed']} | {r['wasted']} | {saved} |")


if __name__ == "__main__":
    main()
