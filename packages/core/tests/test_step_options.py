"""StepOptions: one frozen type of per-step options, accepted alike by every front door."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest

from agent_saga import (
    AgentKit,
    Compensation,
    ConfigurationError,
    MemoryWAL,
    RetryPolicy,
    SagaAborted,
    SagaFleet,
    StepOptions,
    StepRefused,
    saga_scope,
    tool,
)
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.engine.saga import Saga
from agent_saga.engine.step_options import StepKwargs, option_names
from agent_saga.redaction import REDACTED
from agent_saga.toolspec import ToolSpec


def _noop(**_: Any) -> None:
    return None


# One non-default value per option. Adding an option to StepOptions fails the first test
# below until it gets a value here, and then every front door is checked for it at once.
VALUES: dict[str, Any] = {
    "compensate": Compensation(fn=_noop),
    "retry": RetryPolicy(max_attempts=2, base_delay=0),
    "timeout": 5.0,
    "fallback_action": _noop,
    "inline": True,
    "require_boundary": True,
    "policy_args": {"x": "$.x"},
    "reveal": frozenset({"api_key"}),
    "wait_for_commit": True,
    "origin": "probe",
    "reconcile": ReconcilePolicy(delay=0, attempts=1),
    "record_result": "shape",
    "not_applied_on": (LookupError,),
}


def test_the_options_the_tests_cover_are_exactly_the_options() -> None:
    assert set(VALUES) == option_names()
    assert set(typing.get_type_hints(StepKwargs)) == option_names()  # the **kwargs form, in step


def _front_doors() -> dict[str, Any]:
    def forward(x: int = 1, api_key: str = "k") -> int:
        return x

    async def aforward(x: int = 1, api_key: str = "k") -> int:
        return x

    def via_execute(s: Any) -> None:
        s.execute_sync(tool="t", forward=functools.partial(forward), args={"x": 1}, semantics="COMPENSABLE", **VALUES)

    def via_tool(s: Any) -> None:
        tool(semantics="COMPENSABLE", **VALUES)(forward)(x=1)

    def via_kit(s: Any) -> None:
        AgentKit("k").safe_tool(forward, semantics="COMPENSABLE", **VALUES)(x=1)

    def via_fleet(s: Any) -> None:
        SagaFleet("f").register(forward, framework="fw", semantics="COMPENSABLE", **VALUES)(x=1)

    def via_spec(s: Any) -> None:
        ToolSpec.for_function(forward, semantics="COMPENSABLE", **VALUES).wrap(forward)(x=1)

    def via_options_object(s: Any) -> None:
        opts = StepOptions(semantics="COMPENSABLE", **VALUES)  # type: ignore[arg-type]
        s.execute_sync(tool="t", forward=forward, args={"x": 1}, options=opts)

    return {"execute": via_execute, "@tool": via_tool, "AgentKit.safe_tool": via_kit,
            "SagaFleet.register": via_fleet, "ToolSpec": via_spec, "options=": via_options_object}


@pytest.mark.parametrize("door", sorted(_front_doors()))
def test_every_front_door_passes_every_option_to_the_engine(door: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[StepOptions] = []
    original = Saga._step

    def spy(self: Saga, tool: str, forward: Any, args: Any, opts: StepOptions, via_fallback: bool = False) -> Any:
        seen.append(opts)
        return original(self, tool, forward, args, opts, via_fallback)

    monkeypatch.setattr(Saga, "_step", spy)
    with saga_scope(MemoryWAL()) as s:
        _front_doors()[door](s.saga)
    opts = seen[0]
    for name, value in VALUES.items():
        got = getattr(opts, name)
        if name == "fallback_action":  # a front door binds the call's arguments to it
            got = got.func if isinstance(got, functools.partial) else got
        assert got == value, f"{door} lost option {name}: {got!r}"


def test_unknown_options_and_missing_semantics_are_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown step option\(s\) \['retries'\]"):
        StepOptions.build(None, "REVERSIBLE", {"retries": 3})
    with pytest.raises(ConfigurationError, match="needs semantics"):
        StepOptions.build(None, None, {"timeout": 1})
    with pytest.raises(ConfigurationError, match="timeout= must be a positive"):
        StepOptions("REVERSIBLE", timeout=-1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="policy_args"):
        StepOptions("REVERSIBLE", policy_args={"amount": "amount"})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="retries"):
        tool(semantics="REVERSIBLE", retries=3)  # type: ignore[call-arg]


def test_options_are_frozen_and_shared_when_plain() -> None:
    opts = StepOptions.build(None, "REVERSIBLE", None)
    assert opts is StepOptions.build(None, "reversible".upper(), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.timeout = 3  # type: ignore[misc]


def test_options_from_the_same_keywords_are_built_once_yet_always_validated() -> None:
    def build(**more: Any) -> StepOptions:
        return StepOptions.build(None, "COMPENSABLE", more)

    assert build(compensate=_noop) is build(compensate=_noop)  # a front door's usual call
    assert build(compensate=_noop, timeout=2.0) is not build(compensate=_noop, timeout=3.0)
    assert build(inline=True, compensate=_noop).inline is True
    with pytest.raises(ConfigurationError, match="inline= must be True or False"):
        build(inline=1, compensate=_noop)  # equal to True, yet refused: not answered from the cache
    with pytest.raises(ConfigurationError, match="timeout"):
        build(timeout=float("nan"), compensate=_noop)
    unhashable = RetryPolicy(retry_on=[ValueError])  # type: ignore[arg-type]
    assert build(compensate=_noop, retry=unhashable).retry is unhashable  # built, just not kept
    payload = ["a call's data"]

    def holds(result: Any) -> Compensation:  # a closure over a call's data is never kept alive
        return Compensation(fn=_noop, kwargs={"n": len(payload)})

    assert build(compensate=holds) is not build(compensate=holds)


def test_execute_takes_options_checked_before_and_builds_the_rest_when_awaited() -> None:
    # Saga.execute hands back the driver's coroutine for options it knows (a bare semantics=, or
    # keywords an earlier call built): the others are built in a coroutine of their own, so that
    # a bad one is refused where the step is awaited, never where execute is called.
    calls: list[str] = []

    def inline_tool() -> str:
        calls.append("ran")
        return "ok"

    async def run() -> None:
        async with saga_scope(MemoryWAL()) as saga:
            assert await saga.execute(tool="t.a", semantics="REVERSIBLE", forward=inline_tool, inline=True) == "ok"
            known = saga.execute(tool="t.b", semantics="REVERSIBLE", forward=inline_tool, inline=True)
            bad = saga.execute(tool="t.c", semantics="REVERSIBLE", forward=inline_tool, inline=1)  # type: ignore[arg-type]
            assert calls == ["ran"]  # neither has run: execute only hands back what to await
            assert await known == "ok"
            with pytest.raises(ConfigurationError, match="inline= must be True or False"):
                await bad  # equal to True, yet refused: not taken from the options built for inline=True
            unknown = saga.execute(tool="t.d", semantics="REVERSIBLE", forward=inline_tool, bogus=1)  # type: ignore[call-arg]
            with pytest.raises(ConfigurationError, match="unknown step option"):
                await unknown
        assert calls == ["ran", "ran"]

    asyncio.run(run())


def test_secret_looking_arguments_never_reach_the_log_unless_revealed() -> None:
    wal = MemoryWAL()
    with saga_scope(wal) as s:
        s.execute(tool="pay", semantics="COMPENSABLE", forward=lambda: {"id": 1},
                  compensate=lambda r: Compensation(fn=_noop),
                  args={"amount": 5, "api_key": "sk_live_123", "headers": {"Authorization": "Bearer t"}})
        s.execute(tool="probe", semantics="REVERSIBLE", forward=lambda: 1,
                  args={"token": "visible-on-purpose"}, reveal={"token"})
    text = json.dumps(list(wal.records()))
    assert "sk_live_123" not in text and "Bearer t" not in text
    intent = next(r for r in wal.records() if r["type"] == "STEP_INTENT")
    assert intent["body"]["args"] == {"amount": 5, "api_key": REDACTED, "headers": {"Authorization": REDACTED}}
    assert "visible-on-purpose" in text


def test_policy_args_are_read_from_the_call_and_policed_or_refused() -> None:
    wal = MemoryWAL()
    with saga_scope(wal) as s:
        s.execute(tool="pay", semantics="REVERSIBLE", forward=lambda: 1,
                  args={"order": {"total": 70}}, policy_args={"amount": "$.order.total"})
        with pytest.raises(StepRefused, match="does not resolve"):
            s.execute(tool="pay", semantics="REVERSIBLE", forward=lambda: 1,
                      args={"order": {}}, policy_args={"amount": "$.order.total"})
    committed = next(r for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["args"]["amount"] == 70
    refused = next(r for r in wal.records() if r["type"] == "STEP_REFUSED")
    assert refused["body"]["rule"] == "policy_args"


_KILLED_AFTER_RETURN = textwrap.dedent("""
    import os, sys
    from agent_saga import Compensation, FileWAL, compensator, saga_scope

    @compensator("wait.undo")
    def undo(ref: str) -> None: ...

    wait = {wait}
    # A long linger: nobody waits on the commit record, so without wait_for_commit it is
    # still in memory when the process dies right after the step returned.
    wal = FileWAL(sys.argv[1], linger=30.0)
    with saga_scope(wal, wait_for_commit=wait) as s:
        s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {{"id": "ch_1"}},
                  compensate=lambda r: Compensation(handler="wait.undo", kwargs={{"ref": r["id"]}}))
        os._exit(0)
""")


@pytest.mark.slow
@pytest.mark.parametrize("wait", [False, True])
def test_a_process_killed_right_after_a_step_returned(wait: bool, tmp_path: Path) -> None:
    log = tmp_path / "killed.wal"
    subprocess.run([sys.executable, "-c", _KILLED_AFTER_RETURN.format(wait=wait), str(log)], check=True, timeout=60)
    types = [json.loads(line)["type"] for line in log.read_text().splitlines()]
    assert "STEP_INTENT" in types
    # The default trades this window for one flush per step: the commit record (with the
    # result-based undo) rides the next flush. wait_for_commit closes it with one more flush.
    assert ("STEP_COMMITTED" in types) is wait


def test_wait_for_commit_per_step_overrides_the_saga() -> None:
    from agent_saga import FileWAL

    barriers: list[int] = []

    class Counting(FileWAL):
        def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
            barriers.append(ticket or 0)
            super().barrier(ticket, timeout)

    wal = Counting(Path("counted.wal"))
    try:
        with saga_scope(wal) as s:
            s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1, compensate=Compensation(fn=_noop))
            plain = len(barriers)
            s.execute(tool="b", semantics="COMPENSABLE", forward=lambda: 1, compensate=Compensation(fn=_noop),
                      wait_for_commit=True)
            assert len(barriers) == plain + 2  # its intent, then its commit record
    finally:
        wal.close()


def test_a_failing_compensate_factory_is_reported_not_probed() -> None:
    calls: list[Any] = []

    def strict(result: Any) -> Compensation:
        calls.append(result)
        if result is None:
            raise ValueError("no result to parse")
        return Compensation(fn=_noop)

    with pytest.raises(SagaAborted), saga_scope(MemoryWAL()) as s:
        s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: {"id": 1}, compensate=strict)
        raise RuntimeError("later failure")
    assert calls == [{"id": 1}]  # called once, with the real result, never with None
