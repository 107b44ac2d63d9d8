"""Peak memory of verifying a large log, in a fresh process per measurement.

    python bench/bench_verify_memory.py [--mb 24] [--src PATH] [--json]

Writes a chained log of about ``--mb`` megabytes (sagas of a few steps with
realistic bodies), then runs ``agent_saga.audit.verify_log`` on it in a child
process and reports that child's peak resident set (``ru_maxrss``), next to the
peak of a child that only imports ``agent_saga`` (the floor). ``--src`` points
the children at another checkout's ``packages/core/src`` (to compare with an
older version); the log is always written by the library found first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from agent_saga import FileWAL

CHILD = """
import resource, sys, time
import agent_saga
from agent_saga.audit import verify_log
if sys.argv[1] == "verify":
    started = time.process_time()
    report = verify_log(sys.argv[2])
    assert report.ok, report.label
    cpu = time.process_time() - started
else:
    cpu = 0.0
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu)
"""


def write_log(path: Path, megabytes: float) -> int:
    target = int(megabytes * 1024 * 1024)
    with FileWAL(path, linger=0.05) as wal:
        saga = 0
        while True:
            sid = f"{saga:032x}"
            wal.append("SAGA_STARTED", sid, {"name": "checkout", "owner": "host:1", "lease_ttl": 30.0})
            for step in range(1, 4):
                wal.append("STEP_INTENT", sid, {
                    "tool": "stripe.charge", "semantics": "COMPENSABLE", "op": f"{saga}-{step}",
                    "args": {"amount": 100 * step, "customer": f"cus_{saga:08d}"},
                    "compensation": {"handler": "stripe.refund", "kwargs": {"charge": f"ch_{saga}_{step}"},
                                     "key": f"k{saga}.{step}", "recoverable": True},
                }, step)
                wal.append("STEP_COMMITTED", sid, {"op": f"{saga}-{step}", "compensation": None}, step)
            wal.append("SAGA_COMPLETED", sid, {"steps": 3, "unknown": []})
            saga += 1
            if saga % 500 == 0:
                wal.barrier()
                if path.stat().st_size >= target:
                    return saga


def measure(mode: str, log: Path, src: str | None) -> tuple[int, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(log)], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=24.0, help="log size in megabytes (default: 24)")
    parser.add_argument("--src", help="run the children against this packages/core/src instead")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.wal"
        sagas = write_log(log, args.mb)
        floor, _ = measure("import", log, args.src)
        peak, cpu = measure("verify", log, args.src)
        result = {
            "log_bytes": log.stat().st_size, "sagas": sagas, "records": sagas * 8,
            "import_peak_kib": floor, "verify_peak_kib": peak, "verify_extra_kib": peak - floor,
            "verify_cpu_s": round(cpu, 2), "src": args.src or "installed",
        }
    if args.json:
        print(json.dumps(result))
        return
    print(f"log: {result['log_bytes'] / 2**20:.1f} MiB, {result['records']:,} records ({args.src or 'installed'})")
    print(f"peak RSS: import only {floor / 1024:.1f} MiB; verify {peak / 1024:.1f} MiB "
          f"(+{(peak - floor) / 1024:.1f} MiB); verify CPU {cpu:.2f} s")


if __name__ == "__main__":
    main()
