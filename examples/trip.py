"""The trip every framework example in this folder books, and how each one ends.

The tools are plain functions with one effect each on a dict (the "outside world"): hold a
seat, book a hotel room, charge the card. The scripted model of each example calls them in
that order (``CALLS``); the card is declined (``NotApplied``: certainly nothing was charged),
so the saga undoes the room, then the seat, newest first, with the registered undos below, and
the rollback report says clean. The engine, the log and the undos are real.

Not an example to run: each ``examples/<framework>_trip.py`` imports it.
"""

from typing import Any

from agent_saga import Compensation, NotApplied, compensator

WORLD: dict[str, str] = {}
PROMPT = "Lisbon, three nights, flight TP1351"
#: What the model asks for, one call per turn, then it sums up with ``SUMMARY``.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("hold_seat", {"flight": "TP1351"}), ("book_hotel", {"city": "Lisbon", "nights": 3}),
    ("charge_card", {"amount": 1240}),
]
SUMMARY = "The card was declined."


def hold_seat(flight: str) -> dict[str, str]:
    """Hold a seat on a flight."""
    WORLD["seat_7A"] = f"held on {flight}"
    print(f"    held seat 7A on {flight}")
    return {"seat": "seat_7A"}


def book_hotel(city: str, nights: int) -> dict[str, str]:
    """Book a hotel room."""
    WORLD["room_12"] = f"{city}, {nights} nights"
    print(f"    booked room 12 in {city}")
    return {"room": "room_12"}


def charge_card(amount: int) -> dict[str, str]:
    """Charge the traveller's card."""
    raise NotApplied("card declined")  # the bank said no: nothing was charged


@compensator("trip.release_seat")  # undos registered by name: a recovery daemon can run them after a crash
def release_seat(seat: str) -> None:
    WORLD[seat] = "released"
    print(f"    released {seat}")


@compensator("trip.cancel_room")
def cancel_room(room: str) -> None:
    WORLD[room] = "cancelled"
    print(f"    cancelled {room}")


def seat_undo(result: dict[str, str]) -> Compensation:
    """hold_seat's undo, made from what it returned."""
    return Compensation(fn=release_seat, handler="trip.release_seat", kwargs={"seat": result["seat"]})


def room_undo(result: dict[str, str]) -> Compensation:
    """book_hotel's undo, made from what it returned."""
    return Compensation(fn=cancel_room, handler="trip.cancel_room", kwargs={"room": result["room"]})
