"""The threads that run blocking tools for async sagas: bounded, resizable, measured.

An async saga keeps a plain (sync) tool off its event loop by running it on a
thread. That used to be asyncio's default executor, which has two faults here:

* it is shared with everything else on the loop (``asyncio.to_thread``, the
  loop's own ``getaddrinfo``), so a burst of slow connector calls filled it and
  stalled unrelated sagas whose async tools only needed a DNS lookup;
* it is joined at exit (``asyncio.run`` waits for it, and so does the interpreter
  for every ``ThreadPoolExecutor``), so after Ctrl-C had recorded the rollback the
  process still waited for the abandoned tool to return, for as long as it liked.

This pool has threads of its own, named ``agent-saga-tool-N``, started on demand
(none at import) and ended after a minute with nothing to run, at most :func:`configure_tool_executor`'s ``max_workers`` of them, and daemonic: a
call abandoned by a cancelled saga is never waited for at exit. Its step is then
UNKNOWN in the log, as any call whose outcome nobody saw. The log's flusher and
barrier watchdog are threads of the log (``log.group``, ``log.waiters``), never
this pool's, so a saturated pool cannot delay a durable record.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ToolExecutorStats", "ToolPool", "configure_tool_executor", "tool_executor_stats", "tool_pool"]


def _default_size() -> int:
    # asyncio's default executor's size, so that nothing runs less concurrently than before.
    return min(32, (os.cpu_count() or 1) + 4)


@dataclass(frozen=True, slots=True)
class ToolExecutorStats:
    """How saturated the tool pool is (:func:`tool_executor_stats`).

    ``size``: the most threads it runs at once; ``busy``: threads running a tool now;
    ``queued``: calls waiting for a thread; ``longest_wait``: the longest, in seconds,
    any call has waited for a thread since the process started, the waiting ones included.
    """

    size: int
    busy: int
    queued: int
    longest_wait: float


_Work = tuple[float, Callable[[], Any], "concurrent.futures.Future[Any]"]


class ToolPool:
    """A bounded pool of daemon threads; :func:`tool_pool` is the process's one instance."""

    def __init__(self, size: int | None = None, name: str = "agent-saga-tool", idle_timeout: float = 60.0) -> None:
        self._size = _checked(size) if size is not None else _default_size()
        self._name = name
        self._idle_timeout = idle_timeout  # a thread with nothing to do this long ends
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Work] = collections.deque()
        self._threads = 0  # alive
        self._idle = 0  # alive and waiting for work
        self._busy = 0
        self._longest = 0.0
        self._serial = 0

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue ``fn``; a thread of the pool runs it as soon as one is free."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((time.monotonic(), fn, future))
            if self._idle > len(self._queue) - 1:
                self._wake.notify()
            elif self._threads < self._size:
                self._start()
        return future

    def resize(self, size: int) -> None:
        size = _checked(size)
        with self._lock:
            self._size = size
            # Growing: start threads for calls already waiting. Shrinking: idle threads
            # beyond the size end now, busy ones when their call returns.
            for _ in range(min(size - self._threads, len(self._queue) - self._idle)):
                self._start()
            self._wake.notify_all()

    def stats(self) -> ToolExecutorStats:
        now = time.monotonic()
        with self._lock:
            waiting = [queued for queued, _fn, future in self._queue if not future.cancelled()]
            oldest = now - waiting[0] if waiting else 0.0
            return ToolExecutorStats(self._size, self._busy, len(waiting), max(self._longest, oldest))

    def _start(self) -> None:  # lock held
        self._threads += 1
        self._serial += 1
        thread = threading.Thread(target=self._work, name=f"{self._name}-{self._serial}", daemon=True)
        thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and self._threads <= self._size:
                    self._idle += 1
                    woken = self._wake.wait(self._idle_timeout)
                    self._idle -= 1
                    if not woken and not self._queue:  # idle for a while: the next burst starts threads again
                        self._threads -= 1
                        return
                if self._threads > self._size:  # the pool shrank: this thread is one too many
                    self._threads -= 1
                    return
                queued, fn, future = self._queue.popleft()
                if not future.set_running_or_notify_cancel():  # its saga gave up before it started
                    continue
                self._longest = max(self._longest, time.monotonic() - queued)
                self._busy += 1
            try:
                result = fn()
            except BaseException as err:  # noqa: BLE001 - handed to the awaiting saga
                future.set_exception(err)
            else:
                future.set_result(result)
            finally:
                with self._lock:
                    self._busy -= 1
            del fn, future  # hold no reference to a call's result while parked

    def _forget_threads(self) -> None:
        # In a forked child only the forking thread exists: the counts describe the parent.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue.clear()
        self._threads = self._idle = self._busy = 0


def _checked(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"configure_tool_executor(max_workers=...) needs an int >= 1 (threads for blocking tools), got {size!r}")
    return size


_POOL = ToolPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL._forget_threads)


def tool_pool() -> ToolPool:
    """The pool that runs async sagas' blocking tools."""
    return _POOL


def tool_executor_stats() -> ToolExecutorStats:
    """Size, busy threads, queued calls and the longest wait of the blocking-tool pool."""
    return _POOL.stats()


def configure_tool_executor(*, max_workers: int) -> None:
    """Let at most ``max_workers`` blocking tools of async sagas run at once.

    The default is asyncio's default executor's, min(32, CPUs + 4). It takes effect at
    once: a larger size starts threads for calls already waiting; a smaller one retires
    idle threads now and busy ones as their call returns (a running tool is never cut short).
    """
    _POOL.resize(max_workers)
