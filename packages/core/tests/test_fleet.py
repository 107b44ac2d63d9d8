"""SagaFleet: the saga survives a framework's own threads; coverage is a CI gate."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent_saga import (
    BoundaryRequired,
    Compensation,
    MemoryWAL,
    SagaAborted,
    SagaFleet,
    compensator,
    current_saga,
    saga_scope,
    tool,
)
from agent_saga.fleet import CoverageError

DONE: list[str] = []


@compensator("fleet_test.release")
def release(reservation_id: str) -> None:
    DONE.append(f"release {reservation_id}")


@compensator("fleet_test.unpublish")
def unpublish(doc_id: str, idempotency_key: str | None = None) -> None:
    DONE.append(f"unpublish {doc_id}")


async def crew_call(amount: int) -> dict[str, Any]:
    DONE.append(f"reserve {amount}")
    return {"reservation_id": "res_1"}


def lc_call(title: str) -> dict[str, Any]:
    DONE.append(f"publish {title}")
    return {"doc_id": "doc_1"}


@pytest.fixture(autouse=True)
def _clean() -> None:
    DONE.clear()


def _raw_thread(fn: Any) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:
            box["error"] = err

    # A bare Thread starts with an empty context: this is what loses the saga.
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _pool(fn: Any) -> Any:
    with ThreadPoolExecutor(1) as pool:  # submit() does not copy the context either
        return pool.submit(fn).result()


@pytest.mark.parametrize("executor", [_raw_thread, _pool], ids=["raw-thread", "thread-pool"])
def test_without_the_fleet_the_saga_is_lost_on_a_framework_thread(executor: Any) -> None:
    publish = tool(lc_call, semantics="COMPENSABLE",
                   compensate=lambda r: Compensation(fn=unpublish, handler="fleet_test.unpublish",
                                                     kwargs={"doc_id": r["doc_id"]}))
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as caught, saga_scope(wal):
        assert executor(current_saga) is None
        executor(lambda: publish(title="Q3"))
        raise RuntimeError("later step failed")
    assert DONE == ["publish Q3"]  # ran unprotected: never undone
    assert caught.value.report.steps == ()


@pytest.mark.parametrize("executor", [_raw_thread, _pool], ids=["raw-thread", "thread-pool"])
def test_with_the_fleet_the_saga_is_kept_on_a_framework_thread(executor: Any) -> None:
    fleet = SagaFleet("content-pipeline")
    publish = fleet.register(lc_call, framework="langgraph", name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    seen: list[Any] = []

    def on_thread() -> Any:
        seen.append(current_saga())
        return publish(title="Q3")

    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as caught, fleet.transaction(wal=wal) as saga:
        executor(on_thread)
        raise RuntimeError("later step failed")
    assert seen == [None]  # the thread itself had no saga; the fleet re-attached it
    assert DONE == ["publish Q3", "unpublish doc_1"]
    assert [s.tool for s in caught.value.report.compensated] == ["writer.publish"]
    assert {r["saga"] for r in wal.records()} == {saga.saga_id}


def test_seed_snippet_one_saga_across_frameworks() -> None:
    fleet = SagaFleet("content-pipeline")
    reserve = fleet.register(crew_call, framework="crewai", name="research.reserve",
                             semantics="COMPENSABLE", compensate=release)
    publish = fleet.register(lc_call, framework="langgraph", name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    fleet.assert_fully_covered()          # CI gate: nothing unwindable was missed
    wal = MemoryWAL()

    async def main() -> None:
        async with fleet.transaction(wal=wal):
            await reserve(amount=5000)
            await asyncio.to_thread(publish, title="Q3")   # same saga, different framework, any thread
            raise RuntimeError("notify failed")

    with pytest.raises(SagaAborted) as caught:
        asyncio.run(main())
    assert DONE == ["reserve 5000", "publish Q3", "unpublish doc_1", "release res_1"]
    assert caught.value.report.clean
    assert len({r["saga"] for r in wal.records()}) == 1


def test_a_registered_tool_outside_any_boundary_is_refused() -> None:
    fleet = SagaFleet("f")
    publish = fleet.register(lc_call, framework="langgraph", semantics="COMPENSABLE", compensate=unpublish)
    with pytest.raises(BoundaryRequired, match="outside any saga boundary"):
        publish(title="x")
    with pytest.raises(BoundaryRequired):
        _raw_thread(lambda: publish(title="x"))
    assert DONE == []


def test_two_open_transactions_make_a_foreign_thread_ambiguous_so_it_is_refused() -> None:
    fleet = SagaFleet("f")
    publish = fleet.register(lc_call, framework="langgraph", semantics="COMPENSABLE", compensate=unpublish)
    wal = MemoryWAL()
    with fleet.transaction(wal=wal), fleet.transaction(wal=wal):
        with pytest.raises(BoundaryRequired, match="bind_saga"):
            _raw_thread(lambda: publish(title="x"))
        bound = fleet.bind_saga(lambda: publish(title="y"))
        _raw_thread(bound)
    assert DONE == ["publish y"]


def test_coverage_is_machine_readable_and_flags_what_dies_with_the_process() -> None:
    fleet = SagaFleet("f")
    fleet.register(crew_call, framework="crewai", name="reserve", semantics="COMPENSABLE", compensate=release)
    fleet.register(lc_call, framework="langgraph", name="publish", semantics="COMPENSABLE",
                   compensate=lambda r: Compensation(fn=lambda doc_id: None, kwargs={"doc_id": r["doc_id"]}))
    fleet.register(lambda: None, framework="autogen", name="notify", semantics="IRREVERSIBLE")
    report = fleet.coverage()
    by_name = {t["name"]: t for t in report["tools"]}
    assert by_name["reserve"] == {
        "name": "reserve", "framework": "crewai", "semantics": "COMPENSABLE", "protected": True,
        "boundary_required": True, "undo": "registered", "handler": "fleet_test.release",
        "recoverable_after_crash": True,
    }
    assert by_name["publish"]["undo"] == "factory"
    assert by_name["publish"]["recoverable_after_crash"] is None
    assert by_name["notify"]["recoverable_after_crash"] is False
    assert report["frameworks"] == ["autogen", "crewai", "langgraph"]
    with pytest.raises(CoverageError, match=r"'publish' .*not recoverable after a crash"):
        fleet.assert_fully_covered()
    fleet.assert_fully_covered(require_recoverable=False)
    with pytest.raises(CoverageError, match="'summarize' is expected but not registered"):
        fleet.assert_fully_covered(["reserve", "summarize"], require_recoverable=False)


def test_a_registered_inverse_needs_the_fields_it_names() -> None:
    fleet = SagaFleet("f")
    bad = fleet.register(lambda title: {"id": "d"}, framework="x", name="bad",
                         semantics="COMPENSABLE", compensate=unpublish)
    with pytest.raises(SagaAborted) as caught, fleet.transaction(wal=MemoryWAL()):
        bad(title="t")
    assert "needs ['doc_id']" in str(caught.value.cause)
