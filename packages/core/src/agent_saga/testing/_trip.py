"""The trip an adapter's own tests book, and the fleet snippet run through a framework's loop.

The conformance suite's tools are abstract (``reserve``, ``publish``); an adapter's own tests
tell the story a user reads: book a flight, charge the card, the confirmation mail fails,
both undone newest-first. The tools here are plain functions (each test makes them its
framework's tools) that note what they did in ``DONE``; their undo is registered once, here,
for every adapter.
"""

# No `from __future__ import annotations`: some frameworks (Google ADK, google-genai) read a
# tool's annotations as objects, and these tools become every framework's tools.

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_saga.context import saga_scope
from agent_saga.engine.report import SagaAborted
from agent_saga.fleet import SagaFleet
from agent_saga.log.file import FileWAL
from agent_saga.plugins.patching import unpatch_all
from agent_saga.registry import compensator
from agent_saga.semantics import Compensation
from agent_saga.testing._planned import records

__all__ = [
    "DONE", "REF_UNDO", "TRIP", "TRIP_POLICY", "assert_fleet_undone", "assert_trip_failing_after_the_run_undone",
    "assert_trip_undone_newest_first", "book_flight",
    "cancel_ref", "cancelled", "charge_card", "committed", "refunded", "send_confirmation", "trip_world",
]

#: What the trip's tools and their undo did, in order (``trip_world`` clears it).
DONE: list[str] = []


def book_flight(to: str) -> dict[str, str]:
    """Book a flight."""
    DONE.append(f"book {to}")
    return {"booking": f"bk-{to}"}


@compensator("agent_saga.testing.cancel_flight")
def cancel_flight(booking: str) -> None:
    DONE.append(f"cancel {booking}")


def cancelled(result: dict[str, str]) -> Compensation:
    """The undo of ``book_flight``, from its result."""
    return Compensation(fn=cancel_flight, handler="agent_saga.testing.cancel_flight",
                        kwargs={"booking": result["booking"]})


async def charge_card(amount: int) -> dict[str, str]:
    """Charge the card."""
    DONE.append(f"charge {amount}")
    return {"charge": f"ch-{amount}"}


@compensator("agent_saga.testing.refund")
def refund(charge: str) -> None:
    DONE.append(f"refund {charge}")


def refunded(result: dict[str, str]) -> Compensation:
    """The undo of ``charge_card``, from its result."""
    return Compensation(fn=refund, handler="agent_saga.testing.refund", kwargs={"charge": result["charge"]})


def send_confirmation(email: str) -> str:
    """Send the confirmation mail."""
    raise ConnectionError("mail server unreachable")


@compensator("agent_saga.testing.cancel")
def cancel(ref: str) -> None:
    DONE.append(f"cancel {ref}")


def cancel_ref(result: dict[str, Any]) -> Compensation:
    """The undo of a test's own tool that returns ``{"ref": ...}``: notes ``cancel <ref>`` in ``DONE``."""
    return Compensation(fn=cancel, handler="agent_saga.testing.cancel", kwargs={"ref": result["ref"]})


#: ``cancel_ref`` as a tool policy's ``compensate`` (``patch_all``).
REF_UNDO = {"handler": "agent_saga.testing.cancel", "args": {"ref": "$.ref"}}


#: The model's two calls that book the trip.
TRIP = [("book_flight", {"to": "LIS"}), ("charge_card", {"amount": 420})]
#: The tool policy (``patch_all``) that makes the trip's two tools compensable steps.
TRIP_POLICY: dict[str, Any] = {
    "book_flight": {"semantics": "COMPENSABLE",
                    "compensate": {"handler": "agent_saga.testing.cancel_flight", "args": {"booking": "$.booking"}}},
    "charge_card": {"semantics": "COMPENSABLE",
                    "compensate": {"handler": "agent_saga.testing.refund", "args": {"charge": "$.charge"}}},
}


@contextmanager
def trip_world() -> Iterator[None]:
    """Nothing done and nothing patched before a test, nothing patched after it (an autouse fixture's body)."""
    DONE.clear()
    unpatch_all()
    try:
        yield
    finally:
        unpatch_all()


def committed(wal: FileWAL) -> list[tuple[str, Any]]:
    """Each committed step's tool and the arguments its commit logged (a REVERSIBLE step logs them there)."""
    return [(r["body"]["tool"], r["body"]["args"]) for r in records(wal, "STEP_COMMITTED")]


def assert_trip_undone_newest_first(wal: FileWAL, err: SagaAborted, *, clean: bool = True) -> None:
    """The trip was booked, then each undo ran exactly once, newest first, and the log says so."""
    assert DONE == ["book LIS", "charge 420", "refund ch-420", "cancel bk-LIS"]
    assert [s.tool for s in err.report.compensated] == ["charge_card", "book_flight"]
    assert [r["step"] for r in records(wal, "STEP_COMPENSATED")] == [2, 1]
    assert err.report.clean is clean  # a failed IRREVERSIBLE step is UNKNOWN: never clean


def assert_trip_failing_after_the_run_undone(where: Path, run: Callable[[], object]) -> None:
    """The scenario users try first: the trip booked in a saga, then the work after it fails.

    ``run()`` books the trip through the framework's loop inside one ``saga_scope`` (logged in
    ``where``/trip.wal); both bookings are undone newest-first, exactly once, and the saga's
    error is the work's own.
    """
    wal = FileWAL(where / "trip.wal")

    def work() -> None:
        with saga_scope(wal):
            run()
            raise RuntimeError("payment declined")

    with pytest.raises(SagaAborted) as caught:
        work()
    assert_trip_undone_newest_first(wal, caught.value)
    assert str(caught.value.cause) == "payment declined"
    wal.close()


# -- the fleet snippet: one saga over two frameworks' tools ---------------------------------


async def reserve_budget(amount: int) -> dict[str, Any]:
    """Reserve research budget."""
    DONE.append(f"reserve {amount}")
    return {"reservation_id": "res_1"}


@compensator("agent_saga.testing.release")
def release(reservation_id: str) -> None:
    DONE.append(f"release {reservation_id}")


@compensator("agent_saga.testing.unpublish")
def unpublish(doc_id: str) -> None:
    DONE.append(f"unpublish {doc_id}")


def assert_fleet_undone(
    framework: str, where: Path, tools_of: Callable[[Callable[..., Any]], list[Any]],
    run: Callable[[list[Any], list[tuple[str, dict[str, Any]]]], Any], *, blocking: bool = False,
) -> tuple[SagaAborted, list[str]]:
    """The fleet snippet through ``framework``'s real loop, one saga from start to undo.

    A ``SagaFleet`` registers ``research.reserve`` (another framework's) and ``writer.publish``
    (``framework``'s: the callable ``tools_of`` makes the framework's tools of, with
    ``send_confirmation``). Inside the fleet's transaction the reserve runs, then ``run(tools,
    calls)`` (a coroutine unless ``blocking``) has the model publish and mail; the mail fails
    (or the work after the run does): the publish, run on a thread the framework picked, and
    the reserve are undone newest-first in that one saga, logged in ``where``/fleet.wal. Returns
    the saga's error and the names of the threads the publish ran on.
    """
    threads: list[str] = []

    def publish_draft(title: str) -> dict[str, Any]:
        """Publish the draft."""
        threads.append(threading.current_thread().name)
        DONE.append(f"publish {title}")
        return {"doc_id": "doc_1"}

    fleet = SagaFleet("content-pipeline")
    reserve = fleet.register(reserve_budget, framework="crewai", name="research.reserve",
                             semantics="COMPENSABLE", compensate=release)
    publish = fleet.register(publish_draft, framework=framework, name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    fleet.assert_fully_covered(["research.reserve", "writer.publish"])
    tools = tools_of(publish)
    calls = [("publish_draft", {"title": "Q3"}), ("send_confirmation", {"email": "a@b.c"})]
    wal = FileWAL(where / "fleet.wal")

    async def pipeline() -> None:
        async with fleet.transaction(wal=wal):
            await reserve(amount=5000)
            await run(tools, calls)
            raise RuntimeError("the review failed")  # where the framework gave the model the mail's error

    def blocking_pipeline() -> None:
        with fleet.transaction(wal=wal):
            asyncio.run(reserve(amount=5000))
            run(tools, calls)
            raise RuntimeError("the review failed")

    with pytest.raises(SagaAborted) as caught:
        blocking_pipeline() if blocking else asyncio.run(pipeline())
    assert DONE == ["reserve 5000", "publish Q3", "unpublish doc_1", "release res_1"]
    assert threads[0] != threading.main_thread().name  # the framework's own worker thread
    assert [s.tool for s in caught.value.report.compensated] == ["writer.publish", "research.reserve"]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()
    return caught.value, threads
