"""bench_fleet.py's PostgreSQL figures (issue 43, item 4) keep running and keep printing what BENCHMARKS.md reports.

Only the shapes are checked, never a timing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from servers import pg_url

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[4] / "bench"


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / "bench_fleet.py"), "--pg", pg_url(), *args],
                          capture_output=True, text=True, timeout=600, check=False, cwd=BENCH)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_lone_step_is_measured_against_a_bare_commit_in_the_same_run() -> None:
    out = _run("--lone", "--steps", "50")
    found = re.fullmatch(r"bare INSERT \+ COMMIT p50 ([\d.]+) ms; lone PostgresWAL durable step p50 ([\d.]+) ms; "
                         r"step / floor ([\d.]+)x\n", out)
    assert found, out
    floor, step, ratio = map(float, found.groups())
    assert floor > 0 and step > 0
    assert abs(ratio - step / floor) < 0.01 * ratio + 0.01  # the printed ratio is of the printed medians


def test_the_bounds_put_the_same_step_on_a_free_commit_and_on_one_insert_beside_the_lone_step() -> None:
    out = _run("--bounds", "--steps", "50").splitlines()
    assert len(out) == 2, out
    assert re.fullmatch(r"bare INSERT \+ COMMIT p50 [\d.]+ ms; lone PostgresWAL durable step p50 [\d.]+ ms; "
                        r"step / floor [\d.]+x", out[0]), out
    found = re.fullmatch(r"the same step on a log whose commit does nothing: p50 ([\d.]+) ms \(([\d.]+)x\); "
                         r"whose commit is one autocommit INSERT: p50 ([\d.]+) ms \(([\d.]+)x\)", out[1])
    assert found, out
    free, free_ratio, insert, insert_ratio = map(float, found.groups())
    floor = float(out[0].split(" p50 ")[1].split(" ms")[0])
    for step, ratio in ((free, free_ratio), (insert, insert_ratio)):
        assert step > 0 and abs(ratio - step / floor) < 0.02 * ratio + 0.01  # each ratio is of the printed medians


def test_processes_share_one_log_and_their_steps_are_summed() -> None:
    out = _run("--processes", "2", "--steps", "40")
    found = re.fullmatch(r"PostgresWAL, 2 processes x 64 sagas, one log: (\d+) durable steps/s in total, "
                         r"p50 ([\d.]+) ms, p99 ([\d.]+) ms\n", out)
    assert found, out
    assert int(found.group(1)) > 0 and float(found.group(3)) >= float(found.group(2))


def test_a_reference_commit_and_the_working_tree_are_measured_alternating_as_ratios() -> None:
    out = _run("--ref", "HEAD", "--rounds", "2", "--processes", "2", "--sagas", "2", "--steps", "50")
    lines = out.splitlines()
    assert re.fullmatch(r"working tree / HEAD: 2 alternating rounds, 2 processes x 2 sagas, load average [\d.]+",
                        lines[0]), out
    rows = {}
    for line in lines[3:]:
        found = re.fullmatch(r"\| ([a-zA-Z /0-9]+) \| ([\d,.]+) \| ([\d,.]+) \| ([\d.]+)x \| ([\d.]+), ([\d.]+) \|", line)
        assert found, line
        ref, work, ratio = (float(found.group(i).replace(",", "")) for i in (2, 3, 4))
        # The ratio is of the medians before they were printed to two decimals: within what that rounding allows.
        assert ref > 0 and work > 0
        assert (work - 0.005) / (ref + 0.005) - 0.005 <= ratio <= (work + 0.005) / (ref - 0.005) + 0.005
        rows[found.group(1)] = ratio
    assert list(rows) == ["bare commit p50 ms", "lone step p50 ms", "lone step / bare commit", "fleet steps/s",
                          "fleet p50 ms", "fleet client CPU us/step"]
