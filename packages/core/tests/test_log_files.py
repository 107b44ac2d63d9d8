"""FileWAL at the edges: event loops it served, unusable paths, a full disk, file modes, the last line."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import stat
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from small_disk import run_on_small_disk

from agent_saga import FileWAL
from agent_saga.audit import verify_log
from agent_saga.errors import WALError
from agent_saga.log import read_records


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_each_event_loop_is_forgotten_once_its_barriers_return(wal: FileWAL) -> None:
    """A web handler that runs ``asyncio.run`` per request must not make the log keep every loop."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def request(i: int) -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await wal.barrier_async(wal.append("T", "s", {"i": i}))

    for i in range(200):
        asyncio.run(request(i))
    gc.collect()
    assert sum(ref() is not None for ref in loops) == 0
    assert len(list(read_records(wal.path))) == 200


def test_unusable_paths_raise_wal_errors_with_the_os_error_as_cause(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    fifo = tmp_path / "pipe.wal"
    os.mkfifo(fifo)
    cases = {
        tmp_path: IsADirectoryError,
        blocker / "x.wal": NotADirectoryError,
        Path(""): IsADirectoryError,  # the working directory
    }
    for path, cause in cases.items():
        with pytest.raises(WALError, match="cannot open the log") as info:
            FileWAL(path)
        assert isinstance(info.value.__cause__, cause), (path, info.value.__cause__)
    with pytest.raises(WALError, match="not a regular file"):
        FileWAL(fifo)


def test_files_and_directories_the_log_creates_are_private(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "new" / "deeper" / "agent.wal"
    with FileWAL(path) as wal:
        wal.append("T", "s", {})
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
    with open(path, "ab") as fh:
        fh.write(b'{"seq":2,"ty')  # a torn write
    with FileWAL(path) as wal:
        assert wal.torn_tail is not None
        assert mode(wal.torn_tail.saved_to) == 0o600
    existing = tmp_path / "theirs.wal"
    existing.write_bytes(b"")
    existing.chmod(0o640)
    FileWAL(existing).close()
    assert mode(existing) == 0o640  # a file we did not create keeps its owner's mode


@pytest.mark.slow
def test_a_full_disk_gives_wal_errors_and_leaves_no_empty_sidecar(tmp_path: Path) -> None:
    done = run_on_small_disk(tmp_path, '''
        from agent_saga import FileWAL
        from agent_saga.errors import WALError

        log = DISK / "agent.wal"
        with FileWAL(log) as wal:
            for i in range(3):
                wal.append("T", "s", {"i": i})
        with open(log, "ab") as fh:
            fh.write(b'{"seq":4,"type":"T","bo')  # torn by a crash
        before = log.read_bytes()
        fill(DISK)
        try:
            FileWAL(log)
        except WALError as err:
            assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC, err
            assert "torn record" in str(err) and "nothing was changed" in str(err), err
        else:
            raise AssertionError("opened a log whose torn tail could not be kept")
        assert sorted(p.name for p in DISK.iterdir()) == ["agent.wal", "filler"], list(DISK.iterdir())
        assert log.read_bytes() == before

        os.unlink(DISK / "filler")  # space again: the fragment is set aside, appends go on
        with FileWAL(log) as wal:
            assert wal.torn_tail is not None and wal.torn_tail.fragment.startswith(b'{"seq":4')
            wal.append("T", "s", {"i": 3})
        print("ok")
    ''', size="64k")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


@pytest.mark.slow
def test_creating_a_log_without_a_free_inode_is_a_wal_error(tmp_path: Path) -> None:
    done = run_on_small_disk(tmp_path, '''
        from agent_saga import FileWAL
        from agent_saga.errors import WALError

        for i in range(100):
            try:
                (DISK / f"f{i}").touch()
            except OSError:
                break
        try:
            FileWAL(DISK / "agent.wal")
        except WALError as err:
            assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC, err
            assert "No space left" in str(err), err
        else:
            raise AssertionError("no error")
        assert not (DISK / "agent.wal").exists()
        print("ok")
    ''', inodes=8)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def _strip_final_newline(path: Path) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    path.write_bytes(data[:-1])


def test_a_last_record_without_its_newline_counts_for_readers_and_writers_alike(wal_path: Path) -> None:
    """One rule: a final line that parses is a complete record; only its newline is missing."""
    with FileWAL(wal_path) as wal:
        wal.append("SAGA_STARTED", "s", {"name": "x"})
        wal.append("STEP_COMMITTED", "s", {"op": "o"}, 1)
    _strip_final_newline(wal_path)

    report = verify_log(wal_path)
    assert report.status == "intact" and report.records == 2
    assert any("no trailing newline" in note for note in report.notes)
    assert [r["type"] for r in read_records(wal_path)] == ["SAGA_STARTED", "STEP_COMMITTED"]

    with FileWAL(wal_path) as wal:
        assert wal.torn_tail is None  # not set aside: it is the committed step's record
        wal.append("SAGA_COMPLETED", "s", {})
    records = [json.loads(line) for line in wal_path.read_bytes().splitlines()]
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert records[2]["prev"] == records[1]["hash"]
    assert wal_path.read_bytes().endswith(b"\n")
    assert not list(wal_path.parent.glob("*.torn-*"))
    assert verify_log(wal_path).ok


def test_garbage_at_the_end_is_damage_not_a_torn_write(wal_path: Path) -> None:
    with FileWAL(wal_path) as wal:
        wal.append("T", "s", {})
    with open(wal_path, "ab") as fh:
        fh.write(b"PNG garbage")  # no writer begins a line like this
    assert verify_log(wal_path).status == "broken"
    with pytest.raises(WALError, match="not a record"):
        FileWAL(wal_path)


def test_a_database_urls_own_parameters_keep_their_spaces_for_libpq() -> None:
    # libpq reads '+' literally: `options=-c name=value` must reach it as %20, not '+'.
    from agent_saga.log.server import split_url

    driver, ours, shown = split_url(
        "postgresql://u:pw@127.0.0.1:5432/db?options=-c%20statement_timeout%3D5s&table=t", table="wal"
    )
    assert "options=-c%20statement_timeout%3D5s" in driver and "+" not in driver
    assert ours == {"table": "t"}
    assert "pw" not in shown and "%20" in shown
