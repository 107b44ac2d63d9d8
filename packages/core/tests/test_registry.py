from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_saga import (
    CompensationError,
    ConfigurationError,
    MemoryWAL,
    SagaAborted,
    call_with,
    compensator,
    delete_by,
    inverse_of,
    saga_scope,
)
from agent_saga.registry import handler_name, inverse_for, registered, resolve, unregister


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    for name in ("reg.refund", "reg.delete", "reg.other", "reg.cancel"):
        unregister(name)


def test_compensator_registers_and_resolves() -> None:
    @compensator("reg.refund")
    def refund(charge_id: str) -> None: ...

    assert registered("reg.refund")
    assert resolve("reg.refund") is refund
    assert handler_name(refund) == "reg.refund"


def test_resolve_names_what_is_registered() -> None:
    with pytest.raises(KeyError, match=r"no compensation handler named 'reg\.missing'"):
        resolve("reg.missing")


def test_reusing_a_handler_name_for_another_function_is_refused() -> None:
    @compensator("reg.refund")
    def refund(charge_id: str) -> None: ...

    with pytest.raises(ConfigurationError, match="already registered") as info:

        @compensator("reg.refund")
        def something_else(charge_id: str) -> None: ...

    assert "Pick a distinct name" in str(info.value)


def test_re_registering_the_same_function_is_allowed() -> None:
    def refund(charge_id: str) -> None: ...

    compensator("reg.refund")(refund)
    compensator("reg.refund")(refund)
    assert resolve("reg.refund") is refund


@pytest.mark.parametrize("name", ["", "  ", None])
def test_compensator_needs_a_name(name: Any) -> None:
    with pytest.raises(ConfigurationError, match="non-empty name"):
        compensator(name)


def test_inverse_of_raises_at_import_when_the_inverse_is_not_registered() -> None:
    def charge(amount: int) -> dict[str, str]:
        return {"id": "ch_1"}

    with pytest.raises(CompensationError, match="not registered with @compensator"):

        @inverse_of(charge, maps={"charge_id": "id"})
        def refund(charge_id: str) -> None: ...


def test_inverse_of_checks_mapped_argument_names() -> None:
    def charge(amount: int) -> dict[str, str]:
        return {"id": "ch_1"}

    with pytest.raises(CompensationError, match=r"maps names \['chrg'\]"):

        @inverse_of(charge, maps={"chrg": "id"})
        @compensator("reg.refund")
        def refund(charge_id: str) -> None: ...


def test_inverse_of_needs_maps_of_names() -> None:
    with pytest.raises(ConfigurationError, match="maps="):
        inverse_of(print, maps={"charge_id": 1})  # type: ignore[dict-item]


def test_an_inverse_that_needs_no_result_is_known_before_the_call() -> None:
    def enable() -> None: ...

    @inverse_of(enable, maps={})
    @compensator("reg.disable")
    def disable() -> None: ...

    try:
        factory = inverse_for(enable)
        assert factory is not None and getattr(factory, "known_before_call", False)
        comp = factory(None)
        assert comp is not None and comp.handler == "reg.disable" and dict(comp.kwargs) == {}
    finally:
        unregister("reg.disable")


def test_missing_result_field_names_what_was_wanted_and_seen() -> None:
    def charge(amount: int) -> dict[str, Any]:
        return {"charge": "ch_1", "amount": amount}

    @inverse_of(charge, maps={"charge_id": "id"})
    @compensator("reg.refund")
    def refund(charge_id: str) -> None: ...

    factory = inverse_for(charge)
    assert factory is not None
    with pytest.raises(CompensationError) as info:
        factory({"charge": "ch_1", "amount": 5})
    message = str(info.value)
    assert "'id'" in message and "['amount', 'charge']" in message and "charge_id" in message


def test_pairing_reads_attributes_too() -> None:
    class Result:
        id = "ch_9"

    def charge() -> Result:
        return Result()

    @inverse_of(charge, maps={"charge_id": "id"})
    @compensator("reg.refund")
    def refund(charge_id: str) -> None: ...

    factory = inverse_for(charge)
    assert factory is not None
    comp = factory(Result())
    assert comp is not None and dict(comp.kwargs) == {"charge_id": "ch_9"}
    with pytest.raises(CompensationError, match=r"needs field 'id'.*None"):
        factory(None)  # a forward that really returned None has no id to refund


def test_unregister_drops_pairings() -> None:
    def charge() -> dict[str, str]:
        return {"id": "x"}

    @inverse_of(charge, maps={"charge_id": "id"})
    @compensator("reg.refund")
    def refund(charge_id: str) -> None: ...

    unregister("reg.refund")
    assert inverse_for(charge) is None


def test_a_pairing_made_after_a_function_was_first_asked_about_is_found() -> None:
    async def charge() -> dict[str, str]:
        return {"id": "x"}

    assert inverse_for(charge) is None  # asked on every step: the answer is never kept

    @inverse_of(charge, maps={"charge_id": "id"})
    @compensator("reg.late")
    def refund(charge_id: str) -> None: ...

    try:
        factory = inverse_for(charge)
        assert factory is not None and dict(factory({"id": "ch_2"}).kwargs) == {"charge_id": "ch_2"}
    finally:
        unregister("reg.late")
    assert inverse_for(charge) is None


def test_delete_by_takes_a_scalar_or_the_id_field() -> None:
    @compensator("reg.delete")
    def delete(record_id: str, idempotency_key: str | None = None) -> None: ...

    factory = delete_by(delete)
    scalar = factory("r1")
    mapping = factory({"id": "r2"})
    assert scalar is not None and dict(scalar.kwargs) == {"record_id": "r1"}
    assert mapping is not None and dict(mapping.kwargs) == {"record_id": "r2"}
    with pytest.raises(CompensationError, match="needs field 'id'"):
        factory(None)
    with pytest.raises(CompensationError, match="'id'"):
        factory({"name": "r3"})


def test_delete_by_requires_a_parameter_and_registration() -> None:
    @compensator("reg.delete")
    def delete() -> None: ...

    with pytest.raises(CompensationError, match="no parameter"):
        delete_by(delete)
    with pytest.raises(CompensationError, match="not registered"):
        delete_by(lambda x: None)


def test_call_with_validates_json_kwargs_up_front() -> None:
    @compensator("reg.cancel")
    def cancel(order_id: str) -> None: ...

    factory = call_with(cancel, order_id="o1")
    comp = factory(None)
    assert comp.handler == "reg.cancel" and dict(comp.kwargs) == {"order_id": "o1"}
    with pytest.raises(CompensationError, match="JSON round trip"):
        call_with(cancel, order_id=object())


async def test_explicit_compensate_wins_over_a_pairing() -> None:
    undone: list[str] = []

    def charge() -> dict[str, str]:
        return {"id": "ch_1"}

    @inverse_of(charge, maps={"charge_id": "id"})
    @compensator("reg.refund")
    def refund(charge_id: str) -> None:
        undone.append(f"paired {charge_id}")

    @compensator("reg.other")
    def void(charge_id: str) -> None:
        undone.append(f"explicit {charge_id}")

    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="c1", semantics="COMPENSABLE", forward=charge)
            await s.execute(
                tool="c2", semantics="COMPENSABLE", forward=charge,
                compensate=lambda r: {"handler": "reg.other", "kwargs": {"charge_id": r["id"]}},
            )
            raise RuntimeError("fail")
    assert undone == ["explicit ch_1", "paired ch_1"]


def test_reconciler_registers_once_per_name_and_observation_is_tri_state() -> None:
    from agent_saga import Observation, reconciler
    from agent_saga.registry import reconciler_for, unregister_reconciler

    @reconciler("test.recon.charge")
    def observe(*, idempotency_key: str, **args: object) -> Observation:
        return Observation(exists=None, detail="provider could not tell")

    try:
        assert reconciler_for("test.recon.charge") is observe
        assert reconciler_for("test.recon.other") is None
        with pytest.raises(ConfigurationError, match="already registered"):
            reconciler("test.recon.charge")(lambda **kw: Observation())
        seen = observe(idempotency_key="k")
        assert seen.exists is None and seen.reversed_ is None  # "could not tell" survives
        with pytest.raises(ConfigurationError, match="True, False or None"):
            Observation(exists="yes")  # type: ignore[arg-type]
    finally:
        unregister_reconciler("test.recon.charge")
    assert reconciler_for("test.recon.charge") is None


def test_a_collected_forward_never_lends_its_undo_to_an_unrelated_function() -> None:
    import gc

    @compensator("reg.reuse")
    def undo(ref: str) -> None: ...

    def make() -> Any:
        def forward() -> dict[str, str]:
            return {"id": "x"}

        return forward

    try:
        paired = make()
        inverse_of(paired, maps={"ref": "id"})(undo)
        assert inverse_for(paired) is not None
        old = id(paired)
        del paired
        gc.collect()
        # CPython hands the freed memory to a later function object of the same size: an
        # id()-keyed registry would give that stranger the collected function's undo.
        others: list[Any] = []
        stranger = make()
        while id(stranger) != old and len(others) < 10_000:
            others.append(stranger)  # kept alive, so each new function takes a fresh slot
            stranger = make()
        assert id(stranger) == old, "the interpreter did not reuse the id; the scenario did not happen"
        assert inverse_for(stranger) is None
    finally:
        unregister("reg.reuse")


def test_a_pairing_declared_on_a_decorated_tool_is_found_when_it_runs() -> None:
    from agent_saga import MemoryWAL, SagaAborted, saga_scope, tool

    undone: list[str] = []

    @tool(semantics="COMPENSABLE")
    def create_thing(name: str) -> dict[str, str]:
        return {"id": f"t-{name}"}

    @inverse_of(create_thing, maps={"thing_id": "id"})  # declared on the @tool wrapper
    @compensator("reg.delete_thing")
    def delete_thing(thing_id: str) -> None:
        undone.append(thing_id)

    try:
        with pytest.raises(SagaAborted), saga_scope(MemoryWAL()):
            create_thing("a")  # the engine runs the undecorated function underneath
            raise RuntimeError("later failure")
    finally:
        unregister("reg.delete_thing")
    assert undone == ["t-a"]
