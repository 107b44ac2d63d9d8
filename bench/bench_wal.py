"""Durable-path and fast-path cost of agent-saga, against this machine's own floor.

    python bench/bench_wal.py [--dir DIR] [--steps N] [--json] [--peer PYTHON]

Everything is measured in one run, on one disk, so the ratios travel between
machines even when the absolute numbers do not (``harness.py`` says what each
figure is). ``--peer PYTHON`` runs the same harness in that interpreter against
the public ``agent-saga`` 2.3.x from the package index (``peer_agent_saga.py``
adapts its API), right after ours and on the same disk, and prints both side by
side. Make that interpreter with::

    uv venv .tox/peer && uv pip install -p .tox/peer 'agent-saga==2.3.11'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import harness

from agent_saga import Compensation, FileWAL, Saga, SyncSaga, compensator, saga_scope


@compensator("bench.refund")
def _refund(charge_id: str, idempotency_key: str | None = None) -> None:
    return None


def _undo(r: Any) -> Compensation:
    # The seed's shape: a registered handler, its argument taken from the result.
    return Compensation(fn=_refund, handler="bench.refund", kwargs={"charge_id": r["id"]})


async def _charge() -> dict[str, str]:
    return {"id": "ch_1"}


def _charge_sync() -> dict[str, str]:
    return {"id": "ch_1"}


class Ours:
    """This repository's agent-saga, through its public API."""

    name = "agent-saga (this repo)"
    inline_sync = True

    async def open_log(self, path: Path) -> FileWAL:
        return FileWAL(path)

    async def close_log(self, wal: FileWAL) -> None:
        wal.close()

    def flushes(self, wal: FileWAL) -> int:
        return wal.flushes

    @asynccontextmanager
    async def scope(self, wal: FileWAL) -> AsyncIterator[Saga]:
        async with saga_scope(wal) as saga:
            yield saga

    def durable_step(self, saga: Saga) -> Awaitable[Any]:
        return saga.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge, compensate=_undo)

    def sync_scope(self, wal: FileWAL) -> AbstractContextManager[SyncSaga]:
        return saga_scope(wal)

    def durable_step_sync(self, saga: SyncSaga) -> Any:
        return saga.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge_sync, compensate=_undo)

    def reversible_async(self, saga: Saga, tool: Callable[[], Awaitable[int]]) -> Awaitable[Any]:
        return saga.execute(tool="cart.add", semantics="REVERSIBLE", forward=tool)

    def reversible_sync(self, saga: Saga, tool: Callable[[], int], inline: bool) -> Awaitable[Any]:
        return saga.execute(tool="cart.add", semantics="REVERSIBLE", forward=tool, inline=inline)


def _peer(python: str, directory: Path, steps: int) -> dict[str, Any]:
    script = Path(__file__).with_name("peer_agent_saga.py")
    done = subprocess.run(
        [python, str(script), "--dir", str(directory), "--steps", str(steps)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the peer benchmark under {python} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _row(label: str, values: list[str]) -> str:
    return f"  {label:<52}" + "".join(f"{v:>28}" for v in values)


def _table(runs: list[dict[str, Any]]) -> str:
    def each(fmt: Callable[[dict[str, Any]], str]) -> list[str]:
        return [fmt(r) for r in runs]

    def rev(kind: str, r: dict[str, Any]) -> str:
        fig = r["reversible"][kind]
        return "n/a" if fig is None else f"{fig['p50_us']:.1f} / {fig['p99_us']:.1f} us"

    lines = [
        f"WAL benchmark (Python {runs[0]['python']}, {runs[0]['cpus']} CPUs)",
        _row("", each(lambda r: r["subject"])),
        _row("load average (1 min), before / after", each(lambda r: f"{r['loadavg_before']:.2f} / {r['loadavg_after']:.2f}")),
        _row("floor write+fdatasync p50 / p99", each(lambda r: f"{r['floor_p50_ms']:.3f} / {r['floor_p99_ms']:.3f} ms")),
        _row("durable step, 1 saga, p50 / p99", each(lambda r: f"{r['durable_p50_ms']:.3f} / {r['durable_p99_ms']:.3f} ms")),
        _row("durable p50 / floor", each(lambda r: f"{r['durable_ratio_to_floor']:.2f} x")),
        _row("durable step, blocking face, p50 / p99", each(lambda r: "n/a" if not r.get("durable_sync") else
             f"{r['durable_sync']['p50_ms']:.3f} / {r['durable_sync']['p99_ms']:.3f} ms")),
        _row("blocking face p50 / floor", each(lambda r: "n/a" if not r.get("durable_sync") else
             f"{r['durable_sync']['ratio_to_floor']:.2f} x")),
    ]
    for sagas in harness.SAGA_COUNTS:
        def tp(r: dict[str, Any], s: int = sagas) -> dict[str, float]:
            return r["throughput"][str(s)]  # type: ignore[no-any-return]

        lines.append(_row(f"{sagas} sagas: steps/s, fsyncs/step", each(
            lambda r, tp=tp: f"{tp(r)['steps_per_s']:,.0f}, {tp(r)['fsyncs_per_step']:.3f}")))
        lines.append(_row(f"{sagas} sagas: CPU per step (user)", each(
            lambda r, tp=tp: f"{tp(r)['cpu_us_per_step']:.0f} ({tp(r)['user_us_per_step']:.0f}) us")))
    for kind, label in (("async", "async tool"), ("sync_inline", "sync tool, inline=True"),
                        ("sync_thread", "sync tool on a thread"), ("thread_hop_alone", "  the thread hop alone")):
        lines.append(_row(f"REVERSIBLE overhead p50/p99: {label}", each(lambda r, k=kind: rev(k, r))))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=1000, help="samples per latency measurement")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--peer", metavar="PYTHON", help="also measure the public agent-saga 2.3.x installed there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        runs = [asyncio.run(harness.run(Ours(), Path(tmp), args.steps))]
        if args.peer:
            runs.append(_peer(args.peer, Path(tmp), args.steps))
    print(json.dumps(runs, indent=2) if args.json else _table(runs))


if __name__ == "__main__":
    sys.exit(main())
