"""Reaching the test servers, and starting throwaway ones a test may kill and restart.

`scripts/services start` serves Redis on 127.0.0.1:6399 and PostgreSQL 15 on 127.0.0.1:55432;
`eval "$(scripts/services env)"` exports REDIS_URL, AGENT_SAGA_TEST_PG_URL and AGENT_SAGA_TEST_PG_BIN.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from gate_support import server_port

DEFAULT_REDIS = "redis://127.0.0.1:6399/0"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:55432/postgres"
HOW = "start it with `scripts/services start` and `eval \"$(scripts/services env)\"`"


def redis_url() -> str:
    import redis

    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as err:
        pytest.fail(f"no Redis answers at {url} ({err}); {HOW}", pytrace=False)
    return url


def pg_url() -> str:
    import psycopg

    url = os.environ.get("AGENT_SAGA_TEST_PG_URL") or DEFAULT_PG
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as err:
        pytest.fail(f"no PostgreSQL answers at {url} ({err}); {HOW}", pytrace=False)
    return url


def edit_stored_line(wal: Any, backend: str, seq: int, old: str, new: str) -> str:
    """Change one stored record behind the log's back (what anyone with database access could do); the forged line."""
    line = next(line for s, line in wal.lines_after(0) if s == seq)
    assert old in line
    forged = line.replace(old, new)
    if backend == "postgres":
        import psycopg

        with psycopg.connect(wal._conninfo, autocommit=True) as conn:
            conn.execute(f"UPDATE {wal.table} SET line = %s WHERE log = %s AND seq = %s", (forged, wal.log_name, seq))
    else:
        key = wal.keys["records"]
        wal.client.zremrangebyscore(key, seq, seq)
        wal.client.zadd(key, {forged: seq})
    return forged


def _wait(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not come up within {timeout:g}s")


class ThrowawayRedis:
    """A redis-server of our own (AOF, fsync always), to kill with SIGKILL and start again.

    It runs with ``aof-load-truncated no``, as ``scripts/services`` does: a SIGKILL can tear the
    append-only file's last transaction, and Redis 7.0 loading that anyway (its default, yes)
    replays the torn part at the next restart (docs/FLEET.md). ``load_truncated=True`` starts it
    with that default, to show what the log does on such a server.
    """

    def __init__(self, directory: Path, *, load_truncated: bool = False) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail(f"redis-server is not installed; {HOW}", pytrace=False)
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = server_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.load_truncated = load_truncated
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.repairs = 0  # torn append-only files cut back with redis-check-aof --fix

    def start(self, *, repair: bool = False) -> None:
        """Start it; ``repair``: if it refuses a torn append-only file, fix it as an operator would."""
        log = self.dir / "redis-server.log"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--aof-load-truncated", "yes" if self.load_truncated else "no", "--logfile", str(log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        proc = self.proc
        _wait(lambda: self._up() or proc.poll() is not None, f"redis-server on port {self.port}")
        if proc.poll() is None:
            return
        said = log.read_text(errors="replace").strip().splitlines()[-1:]
        if repair and any("end of file reading the append only file" in line for line in said):
            # What redis-check-aof does: cut the file before the torn transaction (never acknowledged).
            subprocess.run(["redis-check-aof", "--fix", str(self.manifest())], input=b"y\n", check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.repairs += 1
            self.start()
            return
        raise AssertionError(f"redis-server on port {self.port} exited ({proc.returncode}): {said}")

    def manifest(self) -> Path:
        return self.dir / "appendonlydir" / "appendonly.aof.manifest"

    def incr_file(self) -> Path:
        """The append-only file commits are appended to (Redis 7's multi-part AOF)."""
        return sorted((self.dir / "appendonlydir").glob("*.incr.aof"))[-1]

    def _up(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class ThrowawayPostgres:
    """A PostgreSQL cluster of our own in a temp dir (initdb as the postgres user when root)."""

    def __init__(self) -> None:
        found = os.environ.get("AGENT_SAGA_TEST_PG_BIN") or _pg_bin()
        if not found or not (Path(found) / "initdb").exists():
            pytest.fail(f"PostgreSQL's binaries (initdb, pg_ctl) were not found; {HOW}", pytrace=False)
        self.bin = Path(found)
        self.dir = Path(tempfile.mkdtemp(prefix="agent-saga-pg-"))
        self.port = server_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.restarts = 0
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self._as_pg([str(self.bin / "initdb"), "-D", str(self.dir / "db"), "-A", "trust", "-U", "postgres"])

    def _as_pg(self, argv: list[str]) -> None:
        if os.geteuid() == 0:
            argv = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _ctl(self, *args: str) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._as_pg([str(self.bin / "pg_ctl"), "-D", str(self.dir / "db"), "-w", "-o", opts,
                     "-l", str(self.dir / "log"), *args])

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        """An immediate restart: the server stops as if it crashed, then recovers from its WAL."""
        self._ctl("restart", "-m", "immediate")
        self.restarts += 1

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, as a crash of the host would.

        ``start()`` brings it back; it recovers from its WAL as after any crash.
        """
        pid = int((self.dir / "db" / "postmaster.pid").read_text().split()[0])
        family = [pid] + [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == pid]
        for member in family:
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait(lambda: not any(_running(member) for member in family), f"the killed PostgreSQL (pid {pid})")
        # Its pid may linger as a zombie nobody reaps, which PostgreSQL would take for a live
        # postmaster holding its lock files; after a real crash of the host no such process exists.
        for lock in (self.dir / "db" / "postmaster.pid", self.dir / f".s.PGSQL.{self.port}.lock"):
            lock.unlink(missing_ok=True)
        self.restarts += 1

    def stop(self) -> None:
        try:
            self._ctl("stop", "-m", "fast")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _pg_bin() -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return str(found[-1]) if found else None
