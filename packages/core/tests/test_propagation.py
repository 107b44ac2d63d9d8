"""Saga propagation hooks: a plugin from outside the core adds a hand-off point."""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agent_saga import MemoryWAL, current_saga, saga_scope, tool
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.manager import plugins
from agent_saga.plugins.patching import Patches
from agent_saga.plugins.propagation import carry


class JobQueue:
    """An in-process job queue whose worker thread never saw the caller's context."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.put(("ok", job()))
            except BaseException as err:
                done.put(("err", err))

    def submit(self, job: Callable[[], Any]) -> Any:
        done: queue.Queue[Any] = queue.Queue()
        self._jobs.put((job, done))
        kind, value = done.get(timeout=30)
        if kind == "err":
            raise value
        return value


REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class QueuePlugin:
    """Written outside the core: carries the saga onto the queue's worker, plus its own request id."""

    def __init__(self) -> None:
        self.patches = Patches()

    @hookimpl
    def agent_saga_patch(self, config: Any) -> list[str]:
        def make(original: Any) -> Any:
            def submit(queue_: JobQueue, job: Callable[[], Any]) -> Any:
                return original(queue_, carry(job))  # the hand-off point this plugin adds

            return submit

        self.patches.apply(JobQueue, "submit", make)
        return self.patches.targets()

    @hookimpl
    def agent_saga_unpatch(self) -> list[str]:
        return self.patches.revert()

    @hookimpl
    def agent_saga_capture(self) -> Any:
        request = REQUEST_ID.get()

        @contextlib.contextmanager
        def attach() -> Iterator[None]:
            token = REQUEST_ID.set(request)
            try:
                yield
            finally:
                REQUEST_ID.reset(token)

        return attach


@tool(semantics="REVERSIBLE", require_boundary=True)
def where() -> tuple[str | None, str | None]:
    saga = current_saga()
    return (saga.saga_id if saga else None, REQUEST_ID.get())


def test_without_the_plugin_the_worker_has_no_saga_and_the_tool_refuses() -> None:
    from agent_saga import BoundaryRequired

    jobs = JobQueue()
    with saga_scope(MemoryWAL()):
        try:
            jobs.submit(where)
        except BoundaryRequired:
            refused = True
    assert refused


def test_a_plugin_registered_from_outside_carries_the_saga_to_its_own_pool() -> None:
    jobs = JobQueue()
    plugin = QueuePlugin()
    manager = plugins()
    manager.register(plugin, "job-queue")
    manager.patch("job-queue", config=None)  # type: ignore[arg-type]
    try:
        REQUEST_ID.set("req-7")
        wal = MemoryWAL()
        with saga_scope(wal) as s:
            assert jobs.submit(where) == (s.saga_id, "req-7")
        assert [r["type"] for r in wal.records()].count("STEP_COMMITTED") == 1
    finally:
        manager.unpatch("job-queue")
    # Unpatched again, a job sees the worker's own context: the carried state was taken off.
    assert jobs.submit(lambda: (current_saga(), REQUEST_ID.get())) == (None, None)


def test_carry_outside_a_saga_carries_nothing_and_calls_through() -> None:
    assert carry(lambda: current_saga())() is None
