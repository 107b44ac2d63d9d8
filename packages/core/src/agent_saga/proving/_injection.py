"""Failures injected into a scenario's steps without touching its tools.

The scenario is handed a stand-in for its saga whose ``execute`` counts the steps
and, at the chosen one, either fails before the step starts (it never ran) or
lets the tool's call land and then raises from it (the engine sees an UNKNOWN
outcome, as after a timeout). Everything else goes to the real saga unchanged.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.step_options import StepOptions
from agent_saga.errors import ConfigurationError

__all__ = ["FailureMode", "InjectedFailure", "Injection", "ProbedSaga", "ProbedSyncSaga"]


class FailureMode(enum.StrEnum):
    """How a probed step fails."""

    #: The saga fails just before the step: its tool is never called.
    BEFORE = "before"
    #: The tool's call lands, then raises: the engine cannot know it landed (UNKNOWN).
    AFTER = "after"

    @classmethod
    def parse(cls, value: FailureMode | str) -> FailureMode:
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in cls)
            raise ConfigurationError(f"unknown failure mode {value!r}: use {choices}") from None


class InjectedFailure(Exception):
    """The failure a probe injects; ``step`` is None when it ends the scenario."""

    def __init__(self, step: int | None, tool: str | None, mode: FailureMode) -> None:
        self.step = step
        self.tool = tool
        self.mode = mode
        where = "after the last step" if step is None else f"{mode.value} step {step} ({tool})"
        super().__init__(f"failure injected by prove_rollback {where}")


class Injection:
    """Where one run fails, and which tools it called (shared by the sync and async faces).

    ``at`` is the 1-based number of the ``execute`` call to fail, or None for a
    run that is only observed. Calls are counted under a lock: a scenario that
    runs steps concurrently gets a call order, which the prover then compares
    across runs.
    """

    def __init__(self, at: int | None = None, mode: FailureMode = FailureMode.BEFORE) -> None:
        self.at = at
        self.mode = mode
        self.calls: list[str] = []
        self.fired: InjectedFailure | None = None
        self.called = False  # whether the probed tool was called ("after" mode)
        self._lock = threading.Lock()

    def arm(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Count one ``execute`` call: the options to run it with, or raise before it."""
        tool = str(options.get("tool"))
        with self._lock:
            self.calls.append(tool)
            if len(self.calls) != self.at:
                return dict(options)
            failure = self.fired = InjectedFailure(self.at, tool, self.mode)
        if self.mode is FailureMode.BEFORE:
            raise failure
        armed = dict(options)
        forward = armed.get("forward")
        if callable(forward):  # anything else is the engine's to refuse, with its own message
            armed["forward"] = self._lands_then_fails(forward, failure)
        # One landing per probe: a retried attempt would be a second effect the scenario
        # never asked for, not the failure being probed. (Retries come loose, or inside the
        # StepOptions a wrapped tool hands over.)
        retry = armed.get("retry")
        if isinstance(retry, RetryPolicy):
            armed["retry"] = _once(retry)
        given = armed.get("options")
        if isinstance(given, StepOptions) and given.retry is not None:
            armed["options"] = given.with_changes(retry=_once(given.retry))
        return armed

    def _lands_then_fails(self, forward: Callable[..., Any], failure: InjectedFailure) -> Callable[..., Any]:
        # functools.wraps keeps the tool's signature visible (__wrapped__), so the engine
        # passes idempotency_key exactly when the tool takes one, and an @inverse_of
        # pairing on the tool is still found.
        if inspect.iscoroutinefunction(inspect.unwrap(forward)):

            @functools.wraps(forward)
            async def landed_async(**kwargs: Any) -> Any:
                self.called = True
                await forward(**kwargs)
                raise failure

            return landed_async

        @functools.wraps(forward)
        def landed(**kwargs: Any) -> Any:
            self.called = True
            result = forward(**kwargs)
            if inspect.isawaitable(result):  # a sync callable that returns a coroutine

                async def then_fail() -> Any:
                    await result
                    raise failure

                return then_fail()
            raise failure

        return landed

    def finish(self) -> None:
        """The scenario returned: a probed run still ends in failure, whatever it caught."""
        if self.at is None:
            return
        raise self.fired or InjectedFailure(None, None, self.mode)


def _once(retry: RetryPolicy) -> RetryPolicy:
    return dataclasses.replace(retry, give_up_on=(*retry.give_up_on, InjectedFailure))


class _Probed:
    """Everything but ``execute`` goes to the real saga."""

    def __init__(self, saga: Any, injection: Injection) -> None:
        self._saga = saga
        self._injection = injection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._saga, name)


class ProbedSaga(_Probed):
    """The awaiting face (what ``async with saga_scope()`` yields), with failures injected."""

    async def execute(self, **options: Any) -> Any:
        return await self._saga.execute(**self._injection.arm(options))

    def execute_sync(self, **options: Any) -> Any:
        return self._saga.execute_sync(**self._injection.arm(options))


class ProbedSyncSaga(_Probed):
    """The blocking face (what ``with saga_scope()`` yields), with failures injected."""

    def execute(self, **options: Any) -> Any:
        return self._saga.execute(**self._injection.arm(options))
