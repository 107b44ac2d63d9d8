"""A Gemini chat on Vertex AI books a trip; the card is declined; the bookings are undone.

    python examples/vertex_trip.py

The trip's tools and their undos are in trip.py. Automatic function calling takes them as plain
Python functions, as Google's SDK (``google-genai``) does; ``wrap_tool`` makes each one a saga
step (same name, signature and docstring, so the same declaration for the model) and
``saga_run_sync`` makes the chat message one transaction. The SDK hands the declined charge to
the model as an error and goes on; the helper then fails the run, so nothing booked stays
booked. The model is scripted: a local server answers the SDK's requests as Gemini would (no
network, no key, no project). With a Google Cloud project, drop ``api_key`` and
``http_options`` and pass ``project=`` and ``location=``. The log lands in ./vertex-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-vertex[vertex]'
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google import genai
from google.genai import types
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.vertex import saga_run_sync, wrap_tool

tools = [wrap_tool(hold_seat, semantics="COMPENSABLE", compensate=seat_undo),
         wrap_tool(book_hotel, semantics="COMPENSABLE", compensate=room_undo),
         wrap_tool(charge_card, semantics="IRREVERSIBLE")]


class ScriptedGemini(BaseHTTPRequestHandler):
    """A stand-in for Gemini on 127.0.0.1: one function call per model turn, then a summary."""

    def do_POST(self) -> None:  # generateContent; the turn is how many model turns the request holds
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        turn = sum(content.get("role") == "model" for content in body["contents"])
        part: dict[str, Any] = ({"functionCall": {"name": CALLS[turn][0], "args": CALLS[turn][1]}}
                                if turn < len(CALLS) else {"text": SUMMARY})
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
    client = genai.Client(vertexai=True, api_key="offline",
                          http_options=types.HttpOptions(base_url=f"http://127.0.0.1:{model.server_port}"))
    chat = client.chats.create(model="gemini-2.5-flash", config=types.GenerateContentConfig(tools=tools))
    Path("vertex-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("vertex-trip.wal")
    try:
        saga_run_sync(chat, message=PROMPT, wal=wal)
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
