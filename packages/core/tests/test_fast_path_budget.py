"""The REVERSIBLE fast path stays within its budget: a regression of 1.5x fails here, in the fast lane.

How it decides, without timing anything: the interpreter's own count of the bytecode
instructions a REVERSIBLE step (async tool, on a FileWAL) executes on the caller's
thread (``sys.settrace`` with ``f_trace_opcodes``; the tool's own and the log's flusher
thread are not counted), divided by the count of a fixed floor measured the same way in
the same process: the least a step has to do in plain Python (await the tool, build a
record, encode it, queue it under a lock), written here and never changed. The ratio is
exact — a loaded machine cannot move it — and the floor absorbs what an interpreter
version changes in the count of every function alike. The caller's Python work is what
the fast path's latency is made of: this count went from 615 to 1,093 per step between
0ab27a5 and b5af5b8's successors (1.78x), as the measured p50 went from 4.3 to 8.0 us;
issue 43's round took it to 971 (4.44x the floor's 219), then to 938-941 (4.28-4.30x), then
to 919-921 (4.20x). That pass saved mostly C work this count does not see (the commit
record's encoding: 123.1k -> 106.2k instructions per step, callgrind); test_commit_record.py
pins that path. The next one cut the caller thread's C work (locks taken without ``with``,
Step and StepRequest built positionally, no dict merged for a call without a key, no
StepOptions.build for a bare semantics=): 63.8k -> ~55k instructions on that thread
(callgrind), 910-912 opcodes here (4.16x). The one after it cut objects and calls made per
step (no Call for a plain async tool, no coroutine of execute's own around the driver's, a
Step built from nine arguments, one call building the call op, no inverse_for call for a
plain function, no Call for an inline sync one either): 888-889 opcodes here (4.06x); see
BENCHMARKS.md for its callgrind counts.

``BUDGET`` is the ratio measured when the budget was last set times 1.25: a step that
does 25% more Python work fails, so a 1.5x regression always does. Raise it only with a
measurement (``python bench/compare.py --ref <commit> --figures reversible``) that says
why the fast path must cost more.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from agent_saga import FileWAL, saga_scope

#: Opcodes per REVERSIBLE step / opcodes of the floor, as measured when set (CPython 3.11), times 1.25.
MEASURED = 4.06
BUDGET = MEASURED * 1.25
STEPS = 100


class _Counter:
    """Counts the bytecode instructions executed on this thread while on."""

    def __init__(self) -> None:
        self.opcodes = 0

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.opcodes += 1
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return self._local

    async def per_call(self, fn: Callable[[], Any], n: int) -> float:
        """Opcodes per awaited ``fn()``, over ``n`` calls (after the same number to warm up)."""
        for _ in range(n):
            await fn()
        previous = sys.gettrace()  # coverage's tracer, under `tox -e core`: put back after
        self.opcodes = 0
        sys.settrace(self._global)
        try:
            for _ in range(n):
                await fn()
        finally:
            sys.settrace(previous)
        return self.opcodes / n


async def _tool() -> int:
    return 1


class _Floor:
    """The least a REVERSIBLE step does, in plain Python: the floor the step's count is divided by."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[tuple[str, str]] = []
        self.index = 0

    async def step(self) -> Any:
        self.index += 1
        options = {"semantics": "REVERSIBLE", "inline": False, "timeout": None}
        result = await _tool()
        body = {"tool": "cart.add", "semantics": options["semantics"], "args": {}, "compensation": None,
                "result": result}
        line = json.dumps(body, sort_keys=True, separators=(",", ":"))
        with self.lock:
            self.queue.append(("STEP_COMMITTED", line))
        return result


async def _ratio(wal: FileWAL, extra: Callable[[], None] | None = None) -> tuple[float, float]:
    """(opcodes per REVERSIBLE step, that / the floor's), both counted now, in this process."""
    counter = _Counter()
    floor = await counter.per_call(_Floor().step, STEPS)
    if floor < 100:
        # A tracer that reports (almost) no opcode events for a frame whose events are turned on
        # in its own call event leaves nothing to divide by (seen once with CPython 3.13 outside
        # pytest). Measured: 3.11 (CI) 4.44, 3.12 and 3.13 4.23 for this round's engine; 3.11 4.30
        # after its second pass, 4.20 after its third, 4.16 after its fourth, 4.06 after its fifth.
        pytest.skip(f"this interpreter's tracer reports {floor:.0f} opcode events for the floor's step")
    async with saga_scope(wal) as saga:
        async def step() -> Any:
            if extra is not None:
                extra()
            return await saga.execute(tool="cart.add", semantics="REVERSIBLE", forward=_tool)

        per_step = await counter.per_call(step, STEPS)
    return per_step, per_step / floor


def test_a_reversible_step_stays_within_its_budget_of_python_work(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "fast.wal")
    try:
        per_step, ratio = asyncio.run(_ratio(wal))
    finally:
        wal.close()
    assert ratio <= BUDGET, (
        f"a REVERSIBLE step executes {per_step:.0f} bytecode instructions on the caller's thread, "
        f"{ratio:.2f}x the floor (budget {BUDGET:.2f}x, measured {MEASURED:.2f}x when set): the fast "
        "path regressed; run bench/compare.py --ref <last good commit> --figures reversible"
    )


def test_the_budget_fails_a_step_that_does_half_as_much_work_again(tmp_path: Path) -> None:
    # The same step with extra Python work before it worth half its own count: the
    # regression the budget exists to catch must fail it (a check that passed it would
    # let the 1.5x of issue 43 through again).
    wal = FileWAL(tmp_path / "fast.wal")
    try:
        per_step, _ = asyncio.run(_ratio(wal))
        turns = 1000

        def extra() -> None:
            for _ in range(turns):
                pass

        async def burn() -> None:
            extra()

        per_turn = asyncio.run(_Counter().per_call(burn, 10)) / 1000
        turns = int(per_step * 0.5 / per_turn)
        slowed, ratio = asyncio.run(_ratio(wal, extra))
    finally:
        wal.close()
    assert slowed >= per_step * 1.45, (slowed, per_step)  # the injected work is what was meant
    assert ratio > BUDGET, f"a step 1.5x as costly passed: {ratio:.2f}x against a budget of {BUDGET:.2f}x"
