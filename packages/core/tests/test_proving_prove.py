"""prove_rollback: every step failed in every mode, judged by the world, not by the report."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from proving_world import (
    WORLD,
    C,
    activate_plan,
    charge,
    create_contact,
    deactivate_plan,
    delete_contact,
    onboarding,
    onboarding_sync,
    refund,
    refund_that_lies,
    send_welcome,
)

from agent_saga import (
    Compensation,
    ConfigurationError,
    FileWAL,
    RetryPolicy,
    call_with,
    compensator,
)
from agent_saga.proving import FailureMode, InjectedFailure, RollbackProof, Verdict, prove_rollback
from agent_saga.proving._proof import world_changes
from agent_saga.registry import unregister

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture(autouse=True)
def _fresh_world() -> Iterator[None]:
    WORLD.reset()
    yield
    WORLD.reset()


async def prove(scenario: Any, **options: Any) -> RollbackProof:
    return await prove_rollback(scenario, snapshot=WORLD.snapshot, reset=WORLD.reset, **options)


def verdicts(proof: RollbackProof) -> list[tuple[str, str, Verdict]]:
    return [(p.label.split(" [")[0], p.mode.value, p.verdict) for p in proof.probes]


async def test_three_honest_steps_are_proven_at_every_step_in_both_modes() -> None:
    proof = await prove(onboarding())

    assert proof.proven, proof.format_text()
    assert proof.steps == ("crm.create_contact", "billing.charge", "plans.activate")
    # one probe per step and mode, plus one failing after the last step
    assert [(p.step, p.mode) for p in proof.probes] == [
        (1, FailureMode.BEFORE), (1, FailureMode.AFTER), (2, FailureMode.BEFORE), (2, FailureMode.AFTER),
        (3, FailureMode.BEFORE), (3, FailureMode.AFTER), (4, FailureMode.BEFORE),
    ]
    assert proof.format_text().splitlines()[0] == "rollback proof: proven, 7 probe(s) across 3 step(s)"
    assert proof.happy_path == (
        "contacts: [] -> ['ada@example.com']", "charges: [] -> ['ch_1']", "plans: [] -> ['pro']",
    )
    # "before" never calls the probed tool; "after" calls it, and its undo (known before
    # the call) runs although the engine never heard back.
    by_label = {(p.step, p.mode): p for p in proof.probes}
    assert [o.step for o in by_label[2, FailureMode.BEFORE].undone] == [1]
    assert [o.step for o in by_label[2, FailureMode.AFTER].undone] == [2, 1]
    assert WORLD.snapshot() == {"contacts": [], "charges": [], "plans": []}  # reset() at the end


async def test_an_undo_that_does_nothing_is_caught_named_and_its_leftover_shown() -> None:
    proof = await prove(onboarding(refund_that_lies))

    assert not proof.proven
    assert verdicts(proof) == [
        ("step 1 crm.create_contact", "before", Verdict.OK),
        ("step 1 crm.create_contact", "after", Verdict.OK),
        ("step 2 billing.charge", "before", Verdict.OK),
        ("step 2 billing.charge", "after", Verdict.ENGINE_DISAGREES),
        ("step 3 plans.activate", "before", Verdict.ENGINE_DISAGREES),
        ("step 3 plans.activate", "after", Verdict.ENGINE_DISAGREES),
        ("after the last step", "before", Verdict.ENGINE_DISAGREES),
    ]
    lying = proof.failures[0]
    assert lying.report is not None and lying.report.clean  # the engine's opinion: all fine
    assert lying.left_behind == ("charges: [] -> ['ch_1']",)
    assert [(o.step, o.tool) for o in proof.suspects()] == [(2, "billing.charge")]
    assert proof.disagreements == proof.failures
    text = proof.format_text()
    assert text.splitlines()[0] == "rollback proof: NOT PROVEN, 7 probe(s) across 3 step(s)"
    assert "  LIES step 2 billing.charge [fail after]\n" in text
    assert "         left behind: charges: [] -> ['ch_1']\n" in text
    assert text.splitlines()[-1] == (
        "  undo(s) that report success but leave the world changed: step 2 billing.charge "
        "(proving.billing.refund_that_lies(ref='ch_1'))"
    )


async def test_a_sync_scenario_is_proven_and_a_lying_undo_caught_through_the_blocking_face() -> None:
    assert (await prove(onboarding_sync())).proven
    proof = await prove(onboarding_sync(refund_that_lies))
    assert not proof.proven
    assert [(o.step, o.tool) for o in proof.suspects()] == [(2, "billing.charge")]


async def test_async_snapshot_and_reset_are_awaited() -> None:
    async def snapshot() -> dict[str, list[str]]:
        return WORLD.snapshot()

    async def reset() -> None:
        WORLD.reset()

    proof = await prove_rollback(onboarding(refund_that_lies), snapshot=snapshot, reset=reset)
    assert not proof.proven and len(proof.failures) == 4


async def test_an_undo_that_needs_the_result_leaves_an_unknown_step_and_the_engine_says_so() -> None:
    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics=C,
                           forward=lambda: create_contact("ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        await saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                           compensate=lambda r: Compensation(fn=refund, handler="proving.billing.refund",
                                                             kwargs={"ref": r["id"]}))

    proof = await prove(scenario)

    assert not proof.proven
    [left] = proof.failures
    assert (left.step, left.mode, left.verdict) == (2, FailureMode.AFTER, Verdict.NOT_UNDONE)
    assert left.left_behind == ("charges: [] -> ['ch_1']",)
    assert proof.suspects() == ()  # the engine was honest: nothing lied
    assert "LEFT step 2 billing.charge [fail after]" in proof.format_text()
    assert "step 2 billing.charge unresolved: outcome unknown" in proof.format_text()
    # Accepting the UNKNOWN risk is a choice the caller states; the undo from the
    # result is then exercised by the probe that fails after the last step.
    only_before = await prove(scenario, modes=("before",))
    assert only_before.proven
    assert [(p.step, p.tool) for p in only_before.probes] == [
        (1, "crm.create_contact"), (2, "billing.charge"), (3, None)]


async def test_an_effect_the_snapshot_cannot_see_is_reported_not_proven() -> None:
    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics=C,
                           forward=lambda: create_contact("ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        await saga.execute(tool="mail.welcome", semantics="IRREVERSIBLE",
                           forward=lambda: send_welcome("ada@example.com"))

    proof = await prove(scenario)  # WORLD.snapshot() leaves the outbox out

    assert not proof.proven
    assert {(p.step, p.verdict) for p in proof.failures} == {(2, Verdict.UNSEEN), (3, Verdict.UNSEEN)}
    assert "make snapshot() cover what they change" in proof.format_text()
    assert "step 2 mail.welcome orphaned" in proof.format_text()


async def test_a_scenario_that_swallows_the_failure_is_still_unwound() -> None:
    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics=C,
                           forward=lambda: create_contact("ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        try:
            await saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                               compensate=call_with(refund, ref="ch_1"))
        except InjectedFailure:
            pass  # an agent that shrugs and carries on
        await saga.execute(tool="plans.activate", semantics=C, forward=lambda: activate_plan("pro"),
                           compensate=call_with(deactivate_plan, plan="pro"))

    proof = await prove(scenario)

    assert proof.proven, proof.format_text()
    # failed at step 2, it went on to step 3, and the whole saga was still unwound
    probe = next(p for p in proof.probes if (p.step, p.mode) == (2, FailureMode.BEFORE))
    assert [o.tool for o in probe.undone] == ["plans.activate", "crm.create_contact"]
    assert isinstance(probe.report and probe.report.cause, str) and "InjectedFailure" in probe.report.cause


async def test_a_scenario_that_does_not_repeat_itself_is_not_proven() -> None:
    runs = iter(range(100))

    async def scenario(saga: Any) -> None:
        await saga.execute(tool="crm.create_contact", semantics=C,
                           forward=lambda: create_contact("ada@example.com"),
                           compensate=call_with(delete_contact, email="ada@example.com"))
        if next(runs) % 2 == 0:
            await saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                               compensate=call_with(refund, ref="ch_1"))

    proof = await prove(scenario)
    assert not proof.proven
    assert Verdict.DIVERGED in {p.verdict for p in proof.failures}
    assert "a scenario that does not repeat itself cannot be probed" in proof.format_text()


async def test_the_happy_path_must_succeed_and_be_visible() -> None:
    async def fails(saga: Any) -> None:
        await saga.execute(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                           compensate=call_with(refund, ref="ch_1"))
        raise LookupError("no such plan")

    proof = await prove(fails)
    assert not proof.proven and proof.probes == ()
    assert "the scenario fails with nothing injected (LookupError: no such plan)" in proof.problem
    assert "clean" in proof.problem  # its own rollback is shown

    blind = await prove_rollback(onboarding(), snapshot=lambda: {"charges": []}, reset=WORLD.reset)
    assert not blind.proven and "cannot see what the scenario does" in blind.format_text()

    async def idle(saga: Any) -> None:
        return None

    nothing = await prove(idle)
    assert not nothing.proven and "ran no step through saga.execute" in nothing.problem


async def test_a_wrongly_declared_step_is_bad_input_not_a_finding() -> None:
    async def scenario(saga: Any) -> None:
        await saga.execute(tool="billing.charge", semantics="COMPENSABLE", forward=lambda: charge("ch_1"))

    with pytest.raises(ConfigurationError, match="declared COMPENSABLE but has no undo"):
        await prove(scenario)


@pytest.mark.parametrize(("options", "message"), [
    ({"modes": ("sideways",)}, "unknown failure mode 'sideways': use 'before', 'after'"),
    ({"modes": ()}, "modes= is empty"),
    ({"snapshot": None}, "snapshot= must be callable"),
    ({"reset": "yes"}, "reset= must be callable or None"),
    ({"wal_factory": lambda: "memory"}, "wal_factory must return a WAL"),
    ({"snapshot": lambda: (x for x in [1])}, "snapshot\\(\\) returned a generator that cannot be copied"),
])
async def test_bad_arguments_are_refused_with_the_fix(options: dict[str, Any], message: str) -> None:
    arguments = {"snapshot": WORLD.snapshot, "reset": WORLD.reset, **options}
    with pytest.raises(ConfigurationError, match=message):
        await prove_rollback(onboarding(), **arguments)


async def test_a_plain_function_returning_a_coroutine_is_refused() -> None:
    scenario = onboarding()
    with pytest.raises(ConfigurationError, match="declare it `async def scenario"):
        await prove(lambda saga: scenario(saga))


def test_it_refuses_to_run_without_an_asyncio_loop() -> None:
    coroutine = prove(onboarding())
    with pytest.raises(ConfigurationError, match="runs on asyncio"):
        coroutine.send(None)
    coroutine.close()


async def test_the_probed_call_lands_once_with_its_key_even_under_a_retry_policy() -> None:
    keys: list[str] = []

    def keyed_charge(idempotency_key: str) -> dict[str, str]:
        keys.append(idempotency_key)
        return charge("ch_1")

    async def scenario(saga: Any) -> None:
        await saga.execute(tool="billing.charge", semantics=C, forward=keyed_charge,
                           compensate=call_with(refund, ref="ch_1"),
                           retry=RetryPolicy(max_attempts=5, base_delay=0))

    proof = await prove(scenario, modes=("after",))
    assert proof.proven, proof.format_text()
    # discovery + the probe: two calls, each with the step's key, none retried
    assert len(keys) == 2 and all(keys)


async def test_runs_write_to_the_logs_the_factory_returns_and_each_is_closed(tmp_path: Path) -> None:
    logs: list[FileWAL] = []

    def wal_factory() -> FileWAL:
        logs.append(FileWAL(tmp_path / f"run{len(logs)}.wal"))
        return logs[-1]

    proof = await prove(onboarding(refund_that_lies), wal_factory=wal_factory)
    assert not proof.proven and len(logs) == 1 + len(proof.probes)
    assert all(log.closed for log in logs)
    last = [json.loads(line) for line in (tmp_path / f"run{len(logs) - 1}.wal").read_text().splitlines()]
    assert last[-1]["type"] == "SAGA_ROLLED_BACK" and last[-1]["body"]["clean"] is True  # the lie, on disk


async def test_a_paired_inverse_is_still_found_when_the_probe_wraps_the_tool() -> None:
    from agent_saga import inverse_of

    def open_plan() -> dict[str, str]:
        return {"id": "pro", **(activate_plan_now("pro"))}

    @inverse_of(open_plan, maps={"plan": "id"})
    @compensator("proving.plans.close")
    def close_plan(plan: str) -> None:
        WORLD.remove("plans", plan)

    async def scenario(saga: Any) -> None:
        await saga.execute(tool="plans.open", semantics=C, forward=open_plan)  # undo from the pairing

    try:
        proof = await prove(scenario)
        [after] = proof.failures
        # The pairing was found through the wrapper (no "has no undo" refusal); its undo
        # needs the result, which an UNKNOWN call never gave: unresolved, and said so.
        assert (after.mode, after.verdict) == (FailureMode.AFTER, Verdict.NOT_UNDONE)
        assert "unresolved" in proof.format_text()
        assert (await prove(scenario, modes=("before",))).proven
    finally:
        unregister("proving.plans.close")


def activate_plan_now(plan: str) -> dict[str, str]:
    WORLD.add("plans", plan)
    return {"plan": plan}


async def test_a_probe_whose_call_never_ran_proves_nothing() -> None:
    runs = iter(range(100))

    async def scenario(saga: Any) -> None:
        first = next(runs) == 0
        await saga.execute(tool="billing.charge", semantics=C,
                           forward=(lambda: charge("ch_1")) if first else "not callable",
                           compensate=call_with(refund, ref="ch_1"))

    # From the second run on the engine refuses the step before calling the tool, so the
    # "after" probe never lands its call; the world comes back, but that proves nothing.
    proof = await prove(scenario, modes=("after",))
    assert not proof.proven
    [probe] = proof.probes
    assert probe.verdict is Verdict.DIVERGED
    assert "the probed call never ran" in probe.detail and "forward= for 'billing.charge'" in probe.detail


async def test_an_async_tool_and_the_blocking_face_inside_an_async_scenario_are_probed_too() -> None:
    ids: list[str] = []

    async def activate(idempotency_key: str) -> dict[str, str]:
        assert idempotency_key  # the engine saw through the probe's wrapper to this signature
        return await activate_plan("pro")

    async def scenario(saga: Any) -> None:
        ids.append(saga.saga_id)  # everything but execute reaches the real saga
        await saga.execute(tool="plans.activate", semantics=C, forward=activate,
                           compensate=call_with(deactivate_plan, plan="pro"))
        saga.execute_sync(tool="billing.charge", semantics=C, forward=lambda: charge("ch_1"),
                          compensate=call_with(refund_that_lies, ref="ch_1"))

    proof = await prove(scenario)

    assert proof.steps == ("plans.activate", "billing.charge")
    assert len(set(ids)) == 1 + len(proof.probes)  # a fresh saga per run
    after = {(p.step, p.mode): p for p in proof.probes}
    assert after[1, FailureMode.AFTER].verdict is Verdict.OK  # the async call landed, then was undone
    assert "plans.activate" in [o.tool for o in after[1, FailureMode.AFTER].undone]
    assert [(o.step, o.tool) for o in proof.suspects()] == [(2, "billing.charge")]  # counted via execute_sync


async def test_a_failure_the_scenario_turns_into_its_own_is_named() -> None:
    async def scenario(saga: Any) -> None:
        try:
            await onboarding(refund_that_lies)(saga)
        except InjectedFailure as err:
            raise RuntimeError("the agent panicked") from err

    proof = await prove(scenario, modes="after")  # a bare string is one mode

    assert {p.mode for p in proof.probes} == {FailureMode.AFTER}
    lying = proof.failures[0]
    assert lying.detail == ("the scenario failed with RuntimeError: the agent panicked once the failure "
                            "was injected")
    assert lying.detail in proof.format_text()


def test_world_changes_are_listed_key_by_key() -> None:
    assert world_changes({"a": [1], "b": 2}, {"a": [1], "b": 3, "c": 4}) == ("b: 2 -> 3", "c: (absent) -> 4")
    assert world_changes({"a": 1, "b": 2}, {"b": 2}) == ("a: 1 -> (gone)",)
    assert world_changes([1, 2], [1]) == ("[1, 2] -> [1]",)
    assert world_changes({"a": 1}, {"a": 1}) == ()


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.booleans(), min_size=1, max_size=5))
def test_proven_exactly_when_no_undo_lies_and_the_first_liar_is_named(honest: list[bool]) -> None:
    import asyncio

    async def scenario(saga: Any) -> None:
        for n, ok in enumerate(honest, start=1):
            await saga.execute(tool=f"billing.charge{n}", semantics=C, forward=lambda n=n: charge(f"ch_{n}"),
                               compensate=call_with(refund if ok else refund_that_lies, ref=f"ch_{n}"))

    proof = asyncio.run(prove(scenario))
    assert proof.proven is all(honest)
    liars = [n for n, ok in enumerate(honest, start=1) if not ok]
    assert [o.step for o in proof.suspects()] == liars[:1]
    # every probe that ran a lying undo lies; every other one is clean
    for probe in proof.probes:
        ran_a_liar = any(o.step in liars for o in probe.undone)
        assert (probe.verdict is Verdict.ENGINE_DISAGREES) is ran_a_liar


@pytest.mark.slow
def test_the_example_proves_the_honest_scenario_and_catches_the_lying_one(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(EXAMPLES / "prove_rollback.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    honest, lying = out.split("\n\n", 1)
    assert honest.startswith("rollback proof: proven, 7 probe(s) across 3 step(s)")
    assert lying.startswith("rollback proof: NOT PROVEN, 7 probe(s) across 3 step(s)")
    assert "LIES step 2 billing.charge [fail after]" in lying
    assert "left behind: charges: [] -> ['ch_1']" in lying


def test_memory_is_the_default_log() -> None:
    # prove_rollback must not litter ./agent-saga.wal (the default FileWAL) with probe runs
    import asyncio

    asyncio.run(prove(onboarding()))
    assert not Path("agent-saga.wal").exists()


async def test_tools_that_find_their_saga_themselves_are_probed_too() -> None:
    # A workflow written with @tool (or an adapter's wrap_tool) never touches the saga it is
    # handed: the prover makes its probed saga the current one, so those steps fail on cue too.
    from agent_saga import Compensation, compensator, guard, tool
    from agent_saga.registry import unregister

    world: dict[str, list[str]] = {"rows": []}

    @compensator("prove.drop_row")
    def drop_row(row: str) -> None:
        world["rows"].remove(row)

    @tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=drop_row, handler="prove.drop_row",
                                                                     kwargs={"row": r}))
    async def add_row(row: str) -> str:
        world["rows"].append(row)
        return row

    @guard
    async def workflow() -> None:
        await add_row("a")
        await add_row("b")

    async def scenario(saga: object) -> None:
        await workflow()

    try:
        proof = await prove_rollback(scenario, snapshot=lambda: {"rows": list(world["rows"])},
                                     reset=lambda: world["rows"].clear(), modes=("before",))
    finally:
        unregister("prove.drop_row")
    assert proof.proven, proof.format_text()
    assert len(proof.probes) == 3  # before step 1, before step 2, after the last step
