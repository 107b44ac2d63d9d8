"""The seat-and-hotel trip a model books with one malformed call, for an adapter's own tests.

A framework checks (or the adapter kit binds) a tool's arguments before the step runs; what
must hold is the same in every loop: the malformed call does nothing, and the run's later
failure unwinds what did happen, cleanly, with nothing for a human. The tools are plain
functions each test makes its framework's tools; they note what they did in ``world``.
"""

# No `from __future__ import annotations`: some frameworks read a tool's annotations as objects.

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga.engine.report import SagaAborted
from agent_saga.errors import NotApplied
from agent_saga.log.file import read_records
from agent_saga.recovery.escalations import queue_of
from agent_saga.semantics import Compensation

__all__ = ["REFUSED_CALLS", "SeatTrip", "assert_refused_call_is_no_step", "assert_seat_released"]

#: The model's calls: the hotel's ``nights`` is no integer, so a framework that validates refuses it.
REFUSED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("hold_seat", {"flight": "TP1351"}),
    ("book_hotel", {"city": "Lisbon", "nights": "three"}),
    ("charge_card", {"amount": 1240}),
]


class SeatTrip:
    """One test's trip: ``hold_seat`` and ``book_hotel`` (compensable), ``charge_card`` (declined)."""

    def __init__(self) -> None:
        #: What the tools and their undo did (``{"seat": "released"}`` after a clean rollback).
        self.world: dict[str, str] = {}
        world = self.world

        def hold_seat(flight: str) -> dict[str, str]:
            """Hold a seat on a flight."""
            world["seat"] = flight
            return {"seat": "seat"}

        def book_hotel(city: str, nights: int) -> dict[str, str]:
            """Book a hotel room."""
            world["room"] = city
            return {"room": "room"}

        def charge_card(amount: int) -> None:
            """Charge the card."""
            raise NotApplied("card declined")

        self.hold_seat: Callable[[str], dict[str, str]] = hold_seat
        self.book_hotel: Callable[[str, int], dict[str, str]] = book_hotel
        self.charge_card: Callable[[int], None] = charge_card

    def release(self, seat: str) -> None:
        """Undo a hold or a booking (``seat`` names which)."""
        self.world[seat] = "released"

    def seat_undo(self, result: dict[str, str]) -> Compensation:
        """The undo of ``hold_seat``, from its result."""
        return Compensation(fn=self.release, kwargs={"seat": result["seat"]})

    def room_undo(self, result: dict[str, str]) -> Compensation:
        """The undo of ``book_hotel``, from its result."""
        return Compensation(fn=self.release, kwargs={"seat": result["room"]})


def assert_seat_released(trip: SeatTrip, wal_path: Path, err: SagaAborted) -> None:
    """The rollback was clean, the seat released, the room never booked, nothing for a human."""
    assert err.report.clean, err.report.format_text()
    assert trip.world == {"seat": "released"}  # the room was never booked: the function was not called
    assert queue_of(wal_path).all() == []  # nothing for a human


def assert_refused_call_is_no_step(trip: SeatTrip, wal_path: Path, err: SagaAborted) -> None:
    """As ``assert_seat_released``, and the refused call left no step in the log at all."""
    assert_seat_released(trip, wal_path, err)
    tools_logged = [r["body"]["tool"] for r in read_records(wal_path) if r["type"] == "STEP_INTENT"]
    assert tools_logged == ["hold_seat", "charge_card"]  # the refused call is no step
