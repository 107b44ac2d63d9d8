"""configure_logging(): saga and step ids on every library line, from contextvars; the root logger untouched."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import Lines

from agent_saga import MemoryWAL, SagaAborted, configure_logging, saga_scope
from agent_saga.observability import CorrelationFilter

app_log = logging.getLogger("shop.tools")  # an application's own logger


class AppRecords(logging.Handler):
    """A handler of the application's, with the filter that stamps its records too."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(CorrelationFilter())
        self.records: list[logging.LogRecord] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._guard:
            self.records.append(record)


@pytest.fixture
def app_records() -> AppRecords:
    handler = AppRecords()
    app_log.addHandler(handler)
    app_log.setLevel(logging.INFO)
    yield handler  # type: ignore[misc]
    app_log.removeHandler(handler)


async def test_concurrent_sagas_never_bleed_ids(log_lines: Lines, app_records: AppRecords) -> None:
    wal = MemoryWAL()
    ran: dict[str, str] = {}  # tool -> the saga it ran in

    async def one(n: int) -> None:
        async with saga_scope(wal) as s:
            for step in (1, 2, 3):
                tool = f"t{n}.{step}"
                ran[tool] = s.saga_id

                async def work(tool: str = tool) -> str:
                    await asyncio.sleep(0)  # every saga interleaves with every other
                    app_log.info("working on %s", tool)
                    await asyncio.sleep(0)
                    return tool

                await s.execute(tool=tool, semantics="REVERSIBLE", forward=work)

    def blocking(n: int) -> None:
        with saga_scope(wal) as s:
            for step in (1, 2):
                tool = f"b{n}.{step}"
                ran[tool] = s.saga_id

                def work(tool: str = tool) -> str:
                    app_log.info("working on %s", tool)
                    return tool

                s.execute(tool=tool, semantics="REVERSIBLE", forward=work)

    with ThreadPoolExecutor(8) as pool:
        threads = [asyncio.get_running_loop().run_in_executor(pool, blocking, n) for n in range(16)]
        await asyncio.gather(*(one(n) for n in range(40)), *threads)

    step_lines = [line for line in log_lines.all() if line["message"].startswith("step ")]
    assert len(step_lines) == 40 * 3 + 16 * 2
    for line in step_lines:
        _, number, tool, *_ = line["message"].split()
        assert line["saga_id"] == ran[tool], line
        assert line["step_id"] == int(number) == int(tool.rsplit(".", 1)[1])
    assert len(app_records.records) == 40 * 3 + 16 * 2
    for record in app_records.records:
        tool = record.getMessage().rsplit(" ", 1)[1]
        assert record.saga_id == ran[tool]  # type: ignore[attr-defined]
        assert record.step_id == int(tool.rsplit(".", 1)[1])  # type: ignore[attr-defined]


async def test_outside_any_saga_the_ids_are_none_and_rollbacks_carry_the_step(
    log_lines: Lines, app_records: AppRecords
) -> None:
    app_log.info("before")
    with pytest.raises(SagaAborted) as aborted:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1)
            await s.execute(tool="b", semantics="IRREVERSIBLE", forward=lambda: 2)
            raise ValueError("stop")
    app_log.info("after")
    assert [(r.saga_id, r.step_id) for r in app_records.records] == [(None, None), (None, None)]  # type: ignore[attr-defined]
    saga_id = aborted.value.report.saga_id
    rollback = [(line["step_id"], line["message"]) for line in log_lines.of(saga_id) if line["message"].startswith("rollback")]
    assert rollback == [(2, "rollback of step 2 b: orphaned (IRREVERSIBLE: no undo exists)"),
                        (1, "rollback of step 1 a: kept (REVERSIBLE with nothing to undo)")]
    end = log_lines.of(saga_id)[-1]
    assert end["level"] == "ERROR" and end["message"].startswith(f"saga {saga_id} FAILED")
    assert end["step_id"] is None


def test_the_root_logger_is_never_touched() -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level, list(root.filters))
    library = logging.getLogger("agent_saga")
    library_before = (list(library.handlers), library.level, library.propagate)
    setup = configure_logging(level="DEBUG", stream=io.StringIO())
    try:
        assert (list(root.handlers), root.level, list(root.filters)) == before
        assert library.level == logging.DEBUG and library.propagate is False
    finally:
        setup.close()
    assert (list(library.handlers), library.level, library.propagate) == library_before


def test_text_lines_and_replacing_a_setup() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(stream=first)
    setup = configure_logging(stream=second)  # replaces, does not stack
    try:
        with saga_scope(MemoryWAL()) as s:
            s.execute(tool="inventory.reserve", semantics="REVERSIBLE", forward=lambda: 1)
    finally:
        setup.close()
    assert first.getvalue() == ""
    [step, end] = [line for line in second.getvalue().splitlines() if " agent_saga.saga " in line]
    assert f"INFO agent_saga.saga [saga={s.saga_id} step=1] step 1 inventory.reserve (REVERSIBLE) COMMITTED" in step
    assert end.endswith(f"INFO agent_saga.saga [saga={s.saga_id}] saga {s.saga_id} COMPLETED")


def test_an_apps_own_extra_wins_and_other_loggers_are_not_stamped(log_lines: Lines) -> None:
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    other = logging.getLogger("not.the.library")
    other.addHandler(keep := Keep())
    other.setLevel(logging.INFO)
    other.propagate = False
    try:
        with saga_scope(MemoryWAL()) as s:
            # an application passing its own saga_id must not collide with the stamp
            s.execute(tool="a", semantics="REVERSIBLE",
                      forward=lambda: other.info("x", extra={"saga_id": "mine"}))
    finally:
        other.removeHandler(keep)
    [record] = captured
    assert record.saga_id == "mine"  # type: ignore[attr-defined]
    assert not hasattr(record, "step_id")


def test_bad_input_is_refused_and_nothing_changes() -> None:
    library = logging.getLogger("agent_saga")
    before = (list(library.handlers), library.level)
    with pytest.raises(ValueError, match="LOUD"):
        configure_logging(level="LOUD")
    with pytest.raises(TypeError, match="json"):
        configure_logging(json="yes")  # type: ignore[arg-type]
    assert (list(library.handlers), library.level) == before
