"""Run a command with every core kept busy: the suite's concurrency and recovery tests must hold so.

    python scripts/with_cpu_hog.py [--per-core N] -- COMMAND ...

Starts N busy-looping processes per core (default 1), runs COMMAND, stops them, and exits with
COMMAND's status. A test that waits on time instead of an event (a sleep "long enough" for a
thread to get somewhere, a first poll assumed to have seen something) fails here, where the
scheduler hands each thread a fraction of a core: that is the point (tox -e core-loaded).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys


def _spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-core", type=int, default=1, help="busy processes per core (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.per_core < 1:
        parser.error(f"--per-core must be at least 1, got {args.per_core}")
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range((os.cpu_count() or 1) * args.per_core)]
    for hog in hogs:
        hog.start()
    try:
        return subprocess.call(command)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.join()


if __name__ == "__main__":
    sys.exit(main())
