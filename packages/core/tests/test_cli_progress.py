"""Long verbs show progress on a terminal, and nothing when piped."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga import FileWAL
from agent_saga.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_and_clears_the_line() -> None:
    screen = Terminal()
    with Progress("verifying records", stream=screen, interval=0) as progress:
        progress(0, 10)
        progress(5, 10)
    text = screen.getvalue()
    assert "\rverifying records: 5/10" in text and text.endswith("\r\033[K")


def test_progress_shows_bytes_as_megabytes() -> None:
    screen = Terminal()
    with Progress("verifying", stream=screen, interval=0, megabytes=True) as progress:
        progress(12_345_678, 24_000_000)
    assert "\rverifying: 12.3/24.0 MB" in screen.getvalue()


def test_progress_is_silent_when_piped() -> None:
    pipe = io.StringIO()
    with Progress("verifying records", stream=pipe, interval=0) as progress:
        progress(5, 10)
    assert pipe.getvalue() == ""


@pytest.mark.slow
def test_verify_shows_progress_on_a_real_pty(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "big.wal", linger=0.05)
    for i in range(30_000):
        wal.append("T", f"s{i % 50}", {"i": i})
    wal.close()
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path", str(tmp_path / "big.wal")],
                              stdout=subprocess.PIPE, stderr=terminal, timeout=120, check=False)
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal side is closed and drained
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0
    assert b"\rverifying: " in seen and b" MB" in seen  # bytes of the log, read one line at a time
    assert b"verifying" not in proc.stdout  # the report itself stays clean
