"""SagaOptions: one frozen type of per-saga options, accepted alike by every door that opens a saga."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_saga import (
    AgentKit,
    Boundary,
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    PreFlightGate,
    RetryPolicy,
    Saga,
    SagaFleet,
    SagaOptions,
    current_saga,
    guard,
    saga_scope,
)
from agent_saga.adapter import Adapter, SagaKwargs, ToolSpec, split_saga_options
from agent_saga.engine.saga_options import saga_option_names


class Gadgets(Adapter):
    """An adapter written on the kit, with a run helper in the kit's idiom."""

    framework = "gadgets"
    distribution = "agent-saga-gadgets"
    tool_types = (object,)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return tool


gadgets = Gadgets()


def saga_run(run: Callable[..., Any], *, options: SagaOptions | None = None, **kwargs: Any) -> Any:
    """What an adapter's ``saga_run`` does: the saga options go to the boundary, the rest to the framework."""
    saga, framework = split_saga_options(kwargs)
    with gadgets.boundary(options=options, **saga):
        return run(**framework)


# One non-default value per option. Adding an option to SagaOptions fails the first test
# below until it gets a value here, and then every door is checked for it at once.
def _values() -> dict[str, Any]:
    return {
        "name": "nightly-billing",
        "tags": frozenset({"billing", "nightly"}),
        "gate": PreFlightGate(),
        "wal": MemoryWAL(),
        "wait_for_commit": True,
        "compensation_retry": RetryPolicy(max_attempts=2, base_delay=0),
        "halt_on_compensation_failure": False,
        "rollback_grace": 2.5,
    }


def test_the_options_the_tests_cover_are_exactly_the_options() -> None:
    assert set(_values()) == saga_option_names() == {f.name for f in dataclasses.fields(SagaOptions)}
    assert set(typing.get_type_hints(SagaKwargs)) == saga_option_names()  # the **kwargs form, in step


def _inside() -> Saga:
    saga = current_saga()
    assert saga is not None
    return saga


# Each door, given every option as keywords (kw=True) or as one options= (kw=False); returns
# the saga it opened, as seen from inside.
def _doors() -> dict[str, Callable[[dict[str, Any], bool], Saga]]:
    def split(values: dict[str, Any], kw: bool) -> tuple[SagaOptions | None, dict[str, Any]]:
        return (None, values) if kw else (SagaOptions(**values), {})

    def via_scope(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        with saga_scope(options=options, **more):
            return _inside()

    def via_boundary(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        with Boundary(options=options, **more):
            return _inside()

    def via_guard(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        return guard(options=options, **more)(_inside)()

    def via_kit(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        with AgentKit("kit", wal=MemoryWAL(), gate=PreFlightGate()).transaction(options=options, **more):
            return _inside()

    def via_fleet(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        with SagaFleet("fleet", wal=MemoryWAL()).transaction(options=options, **more):
            return _inside()

    def via_adapter(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        with gadgets.boundary(options=options, **more):
            return _inside()

    def via_run_helper(values: dict[str, Any], kw: bool) -> Saga:
        options, more = split(values, kw)
        return saga_run(lambda: _inside(), options=options, **more)  # type: ignore[no-any-return]

    return {"saga_scope": via_scope, "Boundary": via_boundary, "@guard": via_guard,
            "AgentKit.transaction": via_kit, "SagaFleet.transaction": via_fleet,
            "Adapter.boundary": via_adapter, "saga_run (kit idiom)": via_run_helper}


@pytest.mark.parametrize("kw", [True, False], ids=["keywords", "options="])
@pytest.mark.parametrize("door", sorted(_doors()))
def test_every_door_passes_every_option_to_the_saga(door: str, kw: bool) -> None:
    values = _values()
    saga = _doors()[door](values, kw)
    for name, value in values.items():
        got = saga.wal if name == "wal" else getattr(saga, name)
        assert got is value or got == value, f"{door} lost option {name}: {got!r}"
    started = next(r for r in values["wal"].records() if r["type"] == "SAGA_STARTED")
    assert started["body"]["name"] == "nightly-billing"  # ... all the way to the log


@pytest.mark.parametrize("door", sorted(_doors()))
def test_every_door_refuses_an_option_given_both_ways_and_an_unknown_one(door: str) -> None:
    make = _doors()[door]
    with pytest.raises(ConfigurationError) as caught:
        _both_ways(door)
    message = str(caught.value)
    assert message == "saga option(s) ['name'] given both in options= and as arguments; give each once"
    assert "\n" not in message
    if door == "saga_run (kit idiom)":
        return  # a run helper's other keywords are the framework's own (see the last test)
    with pytest.raises(ConfigurationError, match=r"unknown saga option\(s\) \['retries'\]; the options are: "):
        make({"retries": 3}, True)


def _both_ways(door: str) -> Saga:
    """The door given name= beside an options= that names the saga too."""
    options = SagaOptions(name="from-options", wal=MemoryWAL())
    if door == "saga_scope":
        return saga_scope(options=options, name="from-keyword")  # type: ignore[return-value]
    if door == "Boundary":
        return Boundary(options=options, name="from-keyword")  # type: ignore[return-value]
    if door == "@guard":
        return guard(options=options, name="from-keyword")(_inside)()
    if door == "AgentKit.transaction":
        return AgentKit("k").transaction(options=options, name="from-keyword")  # type: ignore[return-value]
    if door == "SagaFleet.transaction":
        return SagaFleet("f").transaction(options=options, name="from-keyword")  # type: ignore[return-value]
    if door == "Adapter.boundary":
        return gadgets.boundary(options=options, name="from-keyword")  # type: ignore[return-value]
    return saga_run(_inside, options=options, name="from-keyword")  # type: ignore[no-any-return]


def test_options_and_keywords_combine_when_each_option_comes_one_way() -> None:
    wal = MemoryWAL()
    with saga_scope(wal, options=SagaOptions(name="n", tags={"t"}), wait_for_commit=True) as s:  # type: ignore[arg-type]
        assert (s.saga.name, s.saga.tags, s.saga.wal, s.saga.wait_for_commit) == ("n", frozenset({"t"}), wal, True)
    with pytest.raises(ConfigurationError, match=r"\['tags'\] given both"):
        saga_scope(wal, options=SagaOptions(tags={"t"}), tags={"u"})  # type: ignore[arg-type]


@pytest.mark.parametrize("grace", [-1, float("nan"), float("inf"), True, "30"])
def test_a_rollback_grace_that_is_not_a_number_of_seconds_is_refused_in_one_line(grace: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        saga_scope(MemoryWAL(), rollback_grace=grace)
    message = str(caught.value)
    assert message.startswith("rollback_grace= must be a number of seconds >= 0") and "\n" not in message
    assert repr(grace) in message


def test_a_log_given_positionally_and_in_options_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"\['wal'\] given both"):
        saga_scope(MemoryWAL(), options=SagaOptions(wal=MemoryWAL()))
    with pytest.raises(ConfigurationError, match="the log was given twice, positionally and as wal="):
        Boundary(MemoryWAL(), wal=MemoryWAL())
    options = SagaOptions(name="n")
    with saga_scope(None, options=options, name=None) as s:  # a None keyword beside options= is "not given"
        assert s.saga.name == "n"


def test_a_door_fills_only_what_the_caller_left_to_it() -> None:
    kit_wal, kit_gate, mine = MemoryWAL(), PreFlightGate(), MemoryWAL()
    kit = AgentKit("billing", wal=kit_wal, gate=kit_gate)
    with kit.transaction() as s:
        assert (s.saga.name, s.saga.wal, s.saga.gate) == ("billing", kit_wal, kit_gate)
    with kit.transaction(options=SagaOptions(name="refunds", wal=mine)) as s:
        assert (s.saga.name, s.saga.wal, s.saga.gate) == ("refunds", mine, kit_gate)

    fleet_wal = MemoryWAL()
    with SagaFleet("fleet", wal=fleet_wal).transaction(tags={"t"}) as s:
        assert (s.saga.name, s.saga.wal, s.saga.tags) == ("fleet", fleet_wal, frozenset({"t"}))
    assert gadgets.boundary(MemoryWAL()).options.name == "gadgets"
    with saga_scope(MemoryWAL()) as s:
        assert s.saga.name == "saga"


def test_a_guarded_function_names_its_saga_unless_told_otherwise() -> None:
    wal = MemoryWAL()

    @guard(wal=wal)
    def nightly_close() -> str:
        return _inside().name

    @guard(wal=wal, name="close")
    def named() -> str:
        return _inside().name

    assert nightly_close().endswith("nightly_close")
    assert named() == "close"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"tags": "billing"}, "tags= must be a collection of strings"),
        ({"tags": {1}}, "tags= must be strings"),
        ({"wait_for_commit": 1}, "wait_for_commit= must be True or False"),
        ({"halt_on_compensation_failure": None}, "halt_on_compensation_failure= must be True or False"),
        ({"compensation_retry": 3}, "compensation_retry= must be a RetryPolicy"),
        ({"wal": 3}, "wal= must be a log (FileWAL, MemoryWAL, ...), a file path or a log URL"),
        ({"wal": ""}, "wal= must be a log"),
        ({"gate": object()}, "gate= must be a gate"),
        ({"name": 7}, "name= must be a string"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_the_option(given: dict[str, Any], says: str) -> None:
    for make in (lambda: SagaOptions(**given), lambda: saga_scope(**given), lambda: guard(**given)):
        with pytest.raises(ConfigurationError) as caught:
            make()
        assert str(caught.value).startswith(says) and "\n" not in str(caught.value)


@pytest.mark.parametrize("door", sorted(_doors()))
def test_every_door_takes_a_log_by_path_as_the_cli_does(door: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = _doors()[door]({"wal": "trip.wal"}, True)
    again = _doors()[door]({"wal": tmp_path / "trip.wal"}, False)  # a PathLike, absolute: the same file
    assert isinstance(first.wal, FileWAL) and first.wal is again.wal  # one writer for the file, shared
    assert first.saga_id != again.saga_id
    first.wal.barrier()
    started = [r["saga"] for r in first.wal.records() if r["type"] == "SAGA_STARTED"]
    assert started == [first.saga_id, again.saga_id]


def test_the_gate_and_the_approval_gateway_take_a_log_by_path_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 44 §5: PreFlightGate kept the str (its first advisory then failed on str.append) and
    # ApprovalGateway refused it; both now take what --wal-path takes, the process's one writer.
    from agent_saga import ApprovalGateway, ApprovalPolicy, PreFlightGate

    monkeypatch.chdir(tmp_path)
    gate = PreFlightGate(wal="trip.wal")
    gateway = ApprovalGateway(wal=tmp_path / "trip.wal", policy=ApprovalPolicy(timeout=5))
    assert isinstance(gate.wal, FileWAL) and gate.wal is gateway.wal is SagaOptions(wal="trip.wal").wal
    from agent_saga.gate import CircuitBreaker, KillSwitch

    assert CircuitBreaker(wal="trip.wal").wal is KillSwitch(wal="trip.wal").wal is gate.wal  # their transitions' log
    for make in (lambda: PreFlightGate(wal=3), lambda: ApprovalGateway(wal="", policy=ApprovalPolicy(timeout=5))):
        with pytest.raises(ConfigurationError, match=r"^wal= must be a log \(FileWAL, MemoryWAL, ...\), a file path"):
            make()


def test_options_that_are_not_saga_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="options= must be a SagaOptions, got dict"):
        saga_scope(options={"name": "n"})  # type: ignore[arg-type]


def test_options_are_frozen_and_shared_when_plain() -> None:
    assert SagaOptions.build() is SagaOptions.build(None, {})
    options = SagaOptions(tags=["a", "b"])  # type: ignore[arg-type]
    assert options.tags == frozenset({"a", "b"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.name = "x"  # type: ignore[misc]
    assert options.with_changes(name="x") == SagaOptions(name="x", tags=frozenset({"a", "b"}))


def test_a_run_helper_passes_the_frameworks_own_keywords_through() -> None:
    saga, framework = split_saga_options({"name": "n", "wait_for_commit": True, "task": "go", "config": None})
    assert saga == {"name": "n", "wait_for_commit": True}
    assert framework == {"task": "go", "config": None}
    wal = MemoryWAL()
    assert saga_run(lambda task: (task, _inside().name), wal=wal, task="go") == ("go", "gadgets")


@pytest.mark.parametrize("kw", [True, False], ids=["keywords", "options"])
def test_the_saga_itself_takes_the_options_and_spells_none_of_them(kw: bool) -> None:
    import inspect

    from agent_saga.engine.saga import Saga

    values = _values()
    wal = values["wal"]
    saga = Saga(wal, **values) if kw else Saga(wal, options=SagaOptions(**values))
    for name, value in values.items():
        assert getattr(saga, name) == value, name
    assert not saga_option_names() & set(inspect.signature(Saga).parameters) - {"wal"}
    with pytest.raises(ConfigurationError, match="the log was given twice"):
        Saga(MemoryWAL(), wal=wal)
