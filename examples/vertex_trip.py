"""A Gemini chat on Vertex AI books a trip; the payment fails; the bookings are undone.

    python examples/vertex_trip.py

The tools are plain Python functions handed to automatic function calling, as Google's SDK
(``google-genai``) takes them; ``wrap_tool`` makes each a saga step and ``saga_run_sync`` makes
the chat message one transaction. The SDK hands the failed payment to the model as an error
and goes on; the helper then fails the run, so nothing booked stays booked. The model here is
scripted: a local server answers the SDK's requests as Gemini would (no network, no key, no
project). With a Google Cloud project, drop ``api_key`` and ``http_options`` and pass
``project=`` and ``location=``. The log
lands in ./vertex-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-vertex[vertex]'
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google import genai
from google.genai import types

from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted, compensator
from agent_saga.adapters.vertex import saga_run_sync, wrap_tool

WORLD: dict[str, str] = {}  # the "outside world"


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


@compensator("trip.release_seat")  # named undos: a recovery daemon can run them after a crash
def release_seat(seat: str) -> None:
    WORLD[seat] = "released"
    print(f"    released {seat}")


@compensator("trip.cancel_room")
def cancel_room(room: str) -> None:
    WORLD[room] = "cancelled"
    print(f"    cancelled {room}")


tools = [
    wrap_tool(hold_seat, semantics="COMPENSABLE",
              compensate=lambda r: Compensation(fn=release_seat, handler="trip.release_seat", kwargs={"seat": r["seat"]})),
    wrap_tool(book_hotel, semantics="COMPENSABLE",
              compensate=lambda r: Compensation(fn=cancel_room, handler="trip.cancel_room", kwargs={"room": r["room"]})),
    wrap_tool(charge_card, semantics="IRREVERSIBLE"),
]

# -- a scripted stand-in for Gemini on 127.0.0.1: one function call per model turn, then a summary --
SCRIPT = [("hold_seat", {"flight": "TP1351"}), ("book_hotel", {"city": "Lisbon", "nights": 3}),
          ("charge_card", {"amount": 1240})]


class ScriptedGemini(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # generateContent: the turn is how many model turns the request holds
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        turn = sum(content.get("role") == "model" for content in body["contents"])
        part: dict[str, Any] = ({"functionCall": {"name": SCRIPT[turn][0], "args": SCRIPT[turn][1]}}
                                if turn < len(SCRIPT) else {"text": "The card was declined."})
        answer = json.dumps({"candidates": [{"content": {"role": "model", "parts": [part]}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    model = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedGemini)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    # Vertex AI in express mode (an API key); the base URL points the SDK at the stand-in.
    client = genai.Client(vertexai=True, api_key="offline", http_options=types.HttpOptions(
        base_url=f"http://127.0.0.1:{model.server_port}"))
    chat = client.chats.create(model="gemini-2.5-flash", config=types.GenerateContentConfig(tools=tools))
    Path("vertex-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("vertex-trip.wal")
    try:
        saga_run_sync(chat, message="Lisbon, three nights, flight TP1351", wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
        client.close()
        model.shutdown()
        model.server_close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
