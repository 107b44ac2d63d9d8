"""What proving a rollback costs: the bounded model check, and prove_rollback per probe.

    python bench/bench_proving.py [--max-steps 6 8] [--json]

* verify_rollback_invariants(max_steps=N): shapes explored, wall seconds, and
  process CPU per shape (the CPU figure is what travels between machines; the
  wall figure also holds whatever else the machine was doing);
* prove_rollback over the three-step onboarding of examples/prove_rollback.py:
  wall and CPU per probe (every probe is one full run of the scenario, its
  rollback, and two snapshots), measured over 20 proofs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from agent_saga.proving import prove_rollback, verify_rollback_invariants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import prove_rollback as example  # the example's world (examples/ is not a package)


def measure_verify(max_steps: int) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    report = asyncio.run(verify_rollback_invariants(max_steps=max_steps))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"max_steps": max_steps, "shapes": report.shapes, "ok": report.ok, "seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "cpu_ms_per_shape": round(cpu * 1000 / report.shapes, 3)}


def measure_prove(rounds: int = 20) -> dict[str, Any]:
    scenario = example.onboarding(example.refund)

    async def proofs() -> int:
        probes = 0
        for _ in range(rounds):
            proof = await prove_rollback(scenario, snapshot=example.snapshot, reset=example.reset)
            assert proof.proven
            probes += len(proof.probes) + 1  # + the discovery run
        return probes

    wall, cpu = time.perf_counter(), time.process_time()
    runs = asyncio.run(proofs())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"runs": runs, "wall_ms_per_run": round(wall * 1000 / runs, 3),
            "cpu_ms_per_run": round(cpu * 1000 / runs, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, nargs="+", default=[6, 8])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = {
        "python": platform.python_version(),
        "verify": [measure_verify(n) for n in args.max_steps],
        "prove": measure_prove(),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"agent-saga proving benchmark (Python {results['python']})")
    for row in results["verify"]:
        print(f"  verify_rollback_invariants(max_steps={row['max_steps']}): {row['shapes']:>6} shapes, "
              f"{row['seconds']:>6.2f} s wall, {row['cpu_ms_per_shape']:.3f} ms CPU/shape, "
              f"{'no violation' if row['ok'] else 'VIOLATION'}")
    prove = results["prove"]
    print(f"  prove_rollback, 3-step onboarding: {prove['wall_ms_per_run']:.3f} ms wall, "
          f"{prove['cpu_ms_per_run']:.3f} ms CPU per run ({prove['runs']} runs)")


if __name__ == "__main__":
    main()
