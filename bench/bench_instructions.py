"""Instructions per step, counted by valgrind's callgrind: a figure the machine's load cannot move.

    python bench/bench_instructions.py [--json] [--kinds durable durable-256 ...]

Wall and CPU time on a shared machine drift with whatever else runs; the number of
instructions a step executes does not. Each kind runs twice under
``valgrind --tool=callgrind`` (every thread counted: the flusher too), with N and
2N steps; the difference divided by N is the cost of one step, with interpreter
start-up, imports and the log's opening cancelled out. Each thread is counted apart
(``--separate-threads``), so the caller's share (the main thread's: what a step's
latency is made of; the flusher's work is not) is given too. That share moves by a
few percent between runs of one tree: a garbage collection runs on whichever thread
allocates when one is due.

Kinds: ``durable`` (one COMPENSABLE step as in bench_wal.py, one saga),
``durable-256`` (rounds of 256 sagas at once, 15 steps each, saga start and end
included: bench_wal.py's 256-saga figure), ``reversible`` (async tool) and
``reversible-inline`` (sync tool, ``inline=True``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KINDS = {"durable": 400, "durable-256": 1, "reversible": 2000, "reversible-inline": 2000}
_SAGAS, _STEPS_EACH = 256, 15


async def _child(kind: str, n: int, directory: Path) -> None:
    from bench_wal import Ours

    from agent_saga import FileWAL

    ours = Ours()
    wal = FileWAL(directory / "count.wal")

    async def ok() -> int:
        return 1

    def ok_sync() -> int:
        return 1

    try:
        if kind == "durable-256":
            async def one() -> None:
                async with ours.scope(wal) as saga:
                    for _ in range(_STEPS_EACH):
                        await ours.durable_step(saga)

            for _ in range(n):
                await asyncio.gather(*(one() for _ in range(_SAGAS)))
            return
        async with ours.scope(wal) as saga:
            for _ in range(n):
                if kind == "durable":
                    await ours.durable_step(saga)
                elif kind == "reversible":
                    await ours.reversible_async(saga, ok)
                else:
                    await ours.reversible_sync(saga, ok_sync, True)
    finally:
        wal.close()


def _instructions(kind: str, n: int, directory: Path) -> tuple[int, int]:
    """(instructions of every thread, of the main thread's), for ``n`` steps of ``kind``."""
    out = directory / f"callgrind.{kind}.{n}"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
         sys.executable, __file__, "--child", kind, str(n), "--dir", str(directory)],
        check=True, capture_output=True,
    )
    totals: dict[str, int] = {}
    for part in directory.glob(f"{out.name}-*"):  # one file per thread: -01 is the main one
        match = re.search(rb"^(?:summary|totals): (\d+)", part.read_bytes(), re.M)
        assert match, f"no instruction total in {part}"
        totals[part.name.rsplit("-", 1)[1]] = int(match.group(1))
    assert "01" in totals, f"no main thread's count beside {out}"
    return sum(totals.values()), totals["01"]


def measure(kind: str, directory: Path) -> dict[str, Any]:
    n = KINDS[kind]
    (once, caller_once), (twice, caller_twice) = (_instructions(kind, m, directory) for m in (n, 2 * n))
    steps = n * (_SAGAS * _STEPS_EACH if kind == "durable-256" else 1)
    return {"kind": kind, "steps": steps, "instructions_per_step": (twice - once) / steps,
            "caller_instructions_per_step": (caller_twice - caller_once) / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=sorted(KINDS), default=list(KINDS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child[0], int(args.child[1]), Path(args.dir)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(kind, Path(tmp)) for kind in args.kinds]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"  {r['kind']:<20} {r['instructions_per_step']:>10,.0f} instructions per step "
              f"({r['caller_instructions_per_step']:,.0f} on the caller's thread)")


if __name__ == "__main__":
    main()
