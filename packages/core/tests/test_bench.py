"""The benchmarks in bench/ keep running and keep printing every figure docs/BENCHMARKS.md reports.

Only shapes and counts are checked (no timing): a benchmark that broke, or silently
stopped measuring a figure, fails here rather than on the day someone needs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _run(script: str, *args: str, cwd: Path) -> Any:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--json", "--dir", str(cwd), *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=BENCH,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_bench_wal_prints_every_figure(tmp_path: Path) -> None:
    (run,) = _run("bench_wal.py", "--steps", "20", cwd=tmp_path)
    for key in ("floor_p50_ms", "durable_p50_ms", "durable_p99_ms", "durable_ratio_to_floor"):
        assert run[key] > 0, key
    assert run["durable_sync"]["ratio_to_floor"] > 0
    rows = run["throughput"]
    assert sorted(rows, key=int) == ["1", "8", "64", "256"]
    # One saga: every step's intent needs its own flush. Many: they share flushes.
    assert rows["1"]["fsyncs_per_step"] >= 0.9
    assert rows["256"]["fsyncs_per_step"] < 0.5
    for row in rows.values():
        assert row["steps_per_s"] > 0 and row["cpu_us_per_step"] + 1e-6 >= row["user_us_per_step"] >= 0
    assert set(run["reversible"]) == {"async", "sync_inline", "sync_thread", "thread_hop_alone"}
    assert all(fig["p99_us"] >= fig["p50_us"] for fig in run["reversible"].values())


def test_bench_floors_prints_every_part(tmp_path: Path) -> None:
    run = _run("bench_floors.py", "--n", "20", cwd=tmp_path)
    assert list(run["disk"]) == ["inline", "thread", "loop, parked", "loop, held", "durable step"]
    assert run["disk"]["inline"]["ratio"] == 1.0
    durable = run["disk"]["durable step"]  # judged in the same run against the loop -> thread -> loop floor
    assert durable["ratio_to_loop_floor"] == durable["p50_us"] / run["disk"]["loop, parked"]["p50_us"]
    assert all(row["p50_us"] > 0 and isinstance(row["cpu_us"], float) for row in run["disk"].values())
    assert set(run["engine_no_disk_cpu_us"]) == set(run["engine_no_disk_await_cpu_us"]) == {"1", "256"}
    assert run["codec_us_per_record"] > 0 and run["asyncio_await_cpu_us"] > 0


def test_trace_step_times_every_interval(tmp_path: Path) -> None:
    run = _run("trace_step.py", "--steps", "20", cwd=tmp_path)
    assert run["steps_traced"] == 20  # every step passed through every hand-off
    intervals = run["intervals_p50_us"]
    assert len(intervals) == 7 and all(value > 0 for value in intervals.values())
    assert intervals["fdatasync"] < run["step_p50_us"]


def test_bench_rollback_prints_every_figure(tmp_path: Path) -> None:
    run = _run("bench_rollback.py", "--rollbacks", "5", "--undos", "1,3", cwd=tmp_path)
    assert run["floor_p50_ms"] > 0 and run["floor_cpu_us"] >= 0
    assert list(run["undos"]) == ["1", "3"]
    for size, row in run["undos"].items():
        assert row["rollback_p99_ms"] >= row["rollback_p50_ms"] > 0 and row["ratio_to_floor"] > 0
        assert row["cpu_us_per_undo"] > 0
        # Each undo waits for its own flush (its intent, with the previous undo's outcome),
        # and the end record for one more: a rollback of k undos is k + 1 flushes, no fewer
        # (more if a slow undo outlasts the linger, which flushes its outcome on its own).
        assert row["fsyncs_per_rollback"] >= int(size) + 1


def test_bench_replay_prints_every_figure_and_the_work_grows_linearly(tmp_path: Path) -> None:
    small, large = _run("bench_replay.py", "--steps", "40", "80", cwd=tmp_path)
    for row, steps in ((small, 40), (large, 80)):
        assert row["steps"] == steps and row["records"] == 4 * steps + 3
        assert row["frames"] == row["records"] and row["pages"] >= 1 and row["truncated"] is None
        assert row["verdict"] == "rollback clean"
        assert row["replay_cpu_s"] >= 0 and row["load_cpu_s"] >= 0 and row["json_bytes"] > 0
    assert large["ratio_to_first"]["steps"] == 2.0
    # each step is drawn once as it starts, commits, unwinds and is compensated: 4 entries a step
    assert small["step_entries"] == 4 * 40 and large["step_entries"] == 4 * 80


def test_bench_synthetic_recovery_prints_every_figure(tmp_path: Path) -> None:
    run = _run("bench_synthetic_recovery.py", "--sagas", "200", "--real", "20", cwd=tmp_path)
    assert run["sagas"] == 200 and run["chain_after"] == "intact"
    assert run["open_sagas"] == run["swept_open"] == run["recovered"] > 0, "every synthetic crash was recovered"
    assert run["compensated"] > 0 and run["sagas_per_s"] > 0 and run["recovered_per_s"] > 0
    for key in ("fit_s", "synthesize_s", "write_s", "sweep_s", "sweep_cpu_s", "profile_bytes", "records"):
        assert run[key] >= 0, key


def test_bench_array_prints_every_figure(tmp_path: Path) -> None:
    run = _run("bench_array.py", "--sizes", "1000,100000", cwd=tmp_path)
    assert list(run["sizes"]) == ["1000", "100000"]
    for row in run["sizes"].values():
        assert row["reps"] >= 5 and row["floor_cpu_us"] >= 0 and row["capture_cpu_us"] >= 0
        assert row["write_in_saga_cpu_us"] > 0 and row["restore_cpu_us"] >= 0


def test_bench_speculation_prints_both_sides_and_every_count(tmp_path: Path) -> None:
    rows = _run("bench_speculation.py", "--think", "0", "--repeat", "1", cwd=tmp_path)
    off, on = rows
    assert (off["speculation"], on["speculation"]) == (False, True)
    assert off["calls"] == on["calls"] == 16 and off["executions"] == 16 and off["started"] == 0
    # the scripted agent's guesses are the same every run: 14 started, 11 redeemed, 3 wasted
    assert (on["started"], on["redeemed"], on["wasted"]) == (14, 11, 3)
    # 5 real calls and the 11 redeemed guesses ran; a wasted guess may have been cancelled unrun
    assert 16 <= on["executions"] <= 16 + 3
    assert on["seconds"] > 0 and "saved" in on and "saved_pct" in on


def test_compare_runs_both_sides_alternating_and_prints_ratios(tmp_path: Path) -> None:
    # The reference is this very commit: both sides run the same core, each in its own
    # interpreter (compare.py refuses a side that imported the other's core).
    done = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--ref", "HEAD", "--figures", "reversible,durable",
         "--rounds", "2", "--steps", "20", "--json"],
        capture_output=True, text=True, timeout=300, check=False, cwd=BENCH,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert set(run["figures"]) == {"reversible: cpu_us_per_step", "reversible: p50_us",
                                   "durable: cpu_us_per_step", "durable: p50_over_floor",
                                   "durable: log_alone_p50_over_floor"}
    for row in run["figures"].values():
        assert len(row["ref"]) == len(row["work"]) == len(row["ratio_by_round"]) == 2
        assert row["ratio"] == statistics.median(row["work"]) / statistics.median(row["ref"])


def test_compare_names_a_ref_git_cannot_find(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--ref", "no-such-commit-xyz"],
        capture_output=True, text=True, timeout=60, check=False, cwd=BENCH,
    )
    assert done.returncode != 0
    assert "--ref 'no-such-commit-xyz': git archive failed" in done.stderr


def test_bench_resume_dbos_prints_every_figure_for_each_side(tmp_path: Path) -> None:
    # DBOS's side runs only where `dbos` is installed (with this python) and PostgreSQL is named.
    # PostgresWAL's rows need the server and psycopg (the core env names the server, has no psycopg).
    dbos = ["--dbos-python", sys.executable] if importlib.util.find_spec("dbos") else []
    pg = os.environ.get("AGENT_SAGA_TEST_PG_URL", "") if importlib.util.find_spec("psycopg") else ""
    run = _run("bench_resume_dbos.py", "--rounds", "1", "--steps", "10", "--after", "4", "--pg", pg, *dbos, cwd=tmp_path)
    assert (run["steps"], run["after"], run["rounds"]) == (10, 4, 1)
    expected = {"FileWAL REVERSIBLE", "FileWAL COMPENSABLE"}
    if pg:
        expected |= {"PostgresWAL REVERSIBLE", "PostgresWAL COMPENSABLE"} | ({"DBOS"} if dbos else set())
    assert set(run["sides"]) == expected
    for row in run["sides"].values():
        for key in ("wall_ms", "cpu_ms", "body_ms", "served_wall_us", "served_cpu_us", "live_wall_us", "live_cpu_us"):
            assert row[key] > 0, key
