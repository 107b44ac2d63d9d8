"""What google-genai declares and sends for a wrapped tool, the run helpers' targets, patch_all, and the import check."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_vertex import saga_run, saga_run_sync, wrap_tool
from gemini_server import GeminiServer
from vertex_drive import API_KEY, TOKEN, client, closing, config, function_responses, run_async

import agent_saga
from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted, ToolFailed, compensator
from agent_saga.plugins import ToolNotClassified
from agent_saga.testing import assert_moved_fails_at_import

DONE: list[str] = []


@compensator("vertex_test.cancel")
def cancel(booking: str) -> None:
    DONE.append(f"cancel {booking}")


def book_flight(to: str, seats: int = 1) -> dict[str, str]:
    """Book a flight.

    Args:
      to: The destination city.
      seats: How many seats.
    """
    DONE.append(f"book {to}")
    return {"booking": f"bk-{to}"}


def send_confirmation(email: str) -> str:
    """Send the confirmation email."""
    raise NotApplied("mail server refused the connection")


def booked(result: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel, handler="vertex_test.cancel", kwargs={"booking": result["booking"]})


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiServer]:
    with GeminiServer(api_key=API_KEY, token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    DONE.clear()
    yield
    agent_saga.unpatch_all()


@pytest.mark.parametrize("vertex", [True, False], ids=["vertex-ai", "gemini-api"])
def test_the_sdk_declares_a_wrapped_tool_to_the_model_exactly_as_the_plain_one(gemini: GeminiServer, vertex: bool) -> None:
    sent = []
    for tool in (book_flight, wrap_tool(book_flight, semantics="COMPENSABLE", compensate=booked)):
        model = gemini.script([])
        with closing(client(gemini, vertex=vertex)) as made:
            made.models.generate_content(model=model, contents="go", config=config([tool]))
        (request,) = gemini.requests_for(model)
        assert request.api == ("vertex" if vertex else "gemini")  # the endpoint of that API, its credentials
        assert request.headers.get("authorization" if vertex else "x-goog-api-key") == (
            f"Bearer {TOKEN}" if vertex else API_KEY)
        sent.append(request.body["tools"])
    plain, wrapped = sent
    assert wrapped == plain
    (declared,) = plain[0]["functionDeclarations"]
    assert declared["name"] == "book_flight" and declared["description"].startswith("Book a flight.")


def test_a_blocking_chat_is_one_saga_and_the_model_sees_the_tools_error(gemini: GeminiServer, tmp_path: Path) -> None:
    tools = [wrap_tool(book_flight, semantics="COMPENSABLE", compensate=booked),
             wrap_tool(send_confirmation, semantics="IRREVERSIBLE")]
    model = gemini.script([[("book_flight", {"to": "Lisbon"})], [("send_confirmation", {"email": "ada@example.com"})]])
    wal = FileWAL(tmp_path / "chat.wal")
    with closing(client(gemini, vertex=True)) as made, pytest.raises(SagaAborted) as caught:
        chat = made.chats.create(model=model, config=config(tools))
        saga_run_sync(chat, message="fly me to Lisbon", wal=wal, name="trip")
    assert DONE == ["book Lisbon", "cancel bk-Lisbon"]
    assert isinstance(caught.value.cause, ToolFailed)
    assert isinstance(caught.value.cause.cause, NotApplied)
    assert caught.value.report.clean  # the confirmation certainly did not go out
    # The SDK answered the model with the tool's error and went on to the model's last turn.
    assert len(gemini.requests_for(model)) == 3
    answered = function_responses(gemini, model)
    assert '"result": {"booking": "bk-Lisbon"}' in answered[0]
    assert '"error"' in answered[1] and "mail server refused the connection" in answered[1]
    records = list(wal.records())
    assert records[0]["body"]["name"] == "trip"
    assert [r["body"]["tool"] for r in records if r["type"] == "STEP_INTENT"] == ["book_flight", "send_confirmation"]
    wal.close()


def test_a_bound_method_is_a_tool_without_its_self(gemini: GeminiServer, tmp_path: Path) -> None:
    class Desk:
        def __init__(self) -> None:
            self.booked: list[str] = []

        def book(self, to: str) -> dict[str, str]:
            """Book a flight."""
            self.booked.append(to)
            return {"booking": f"bk-{to}"}

    desk = Desk()
    safe = wrap_tool(desk.book, semantics="COMPENSABLE", compensate=booked)
    model = gemini.script([[("book", {"to": "Porto"})]])
    wal = FileWAL(tmp_path / "method.wal")
    with closing(client(gemini, vertex=False)) as made:
        saga_run_sync(made, model=model, contents="go", config=config([safe]), wal=wal)
    assert desk.booked == ["Porto"]
    (declared,) = gemini.requests_for(model)[0].body["tools"][0]["functionDeclarations"]
    assert list(declared.get("parameters_json_schema", declared.get("parameters"))["properties"]) == ["to"]
    (intent,) = [r for r in wal.records() if r["type"] == "STEP_INTENT"]
    assert (intent["body"]["tool"], intent["body"]["args"]) == ("book", {"to": "Porto"})
    wal.close()


def test_each_run_helper_names_what_it_takes(gemini: GeminiServer) -> None:
    with closing(client(gemini, vertex=True)) as made:
        chat = made.chats.create(model="m")
        with pytest.raises(TypeError, match=r"^saga_run takes a genai\.Client, .*got Chat; for a Chat use saga_run_sync$"):
            asyncio.run(saga_run(chat, message="go"))

        async def blocking_on_async() -> None:
            try:
                with pytest.raises(TypeError, match=r"got AsyncChat; for an async client or chat use await saga_run$"):
                    saga_run_sync(made.aio.chats.create(model="m"), message="go")
            finally:
                await made.aio.aclose()

        asyncio.run(blocking_on_async())
    assert gemini.requests_for("/m:") == []  # refused before any request


def test_wrap_tool_takes_functions_and_says_what_else_to_pass() -> None:
    class Booker:
        def __call__(self, to: str) -> str:
            return to

    with pytest.raises(TypeError, match=r"takes builtins\.function, builtins\.method, got .*Booker; automatic "
                                        r"function calling takes plain Python functions"):
        wrap_tool(Booker(), semantics="REVERSIBLE")
    once = wrap_tool(book_flight, semantics="COMPENSABLE", compensate=booked)
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(once, semantics="COMPENSABLE", compensate=booked)


def test_patch_all_names_the_sdk_functions_it_polices_and_an_unclassified_tool_is_refused(
    gemini: GeminiServer, tmp_path: Path
) -> None:
    report = agent_saga.patch_all({"mode": "enforce", "tools": {
        "book_flight": {"semantics": "COMPENSABLE", "compensate": {"handler": "vertex_test.cancel",
                                                                     "args": {"booking": "$.booking"}}}}})
    assert sorted(report.patched["vertex"]) == [
        "google.genai._extra_utils.invoke_function_from_dict_args",
        "google.genai._extra_utils.invoke_function_from_dict_args_async",
    ]
    model = gemini.script([[("book_flight", {"to": "Faro"})], [("send_confirmation", {"email": "a@b"})]])
    wal = FileWAL(tmp_path / "patched.wal")

    async def call(made: Any) -> Any:
        return await saga_run(made, model=model, contents="go", config=config([book_flight, send_confirmation]), wal=wal)

    with pytest.raises(SagaAborted) as caught:
        run_async(client(gemini, vertex=True), call)
    assert DONE == ["book Faro", "cancel bk-Faro"]  # send_confirmation never ran: refused before it
    assert isinstance(caught.value.cause, ToolFailed)
    assert isinstance(caught.value.cause.cause, ToolNotClassified)
    assert [(r["body"]["tool"], r["body"]["rule"]) for r in wal.records() if r["type"] == "STEP_REFUSED"] == [
        ("send_confirmation", "policy.unclassified")]
    wal.close()


def test_an_install_whose_google_genai_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_vertex", "from google.genai import _extra_utils; del _extra_utils.invoke_function_from_dict_args_async",
                                 "google-genai<4,>=2.34.0 (installed: google-genai ", "no longer calls a tool through _extra_utils.invoke_function_from_dict_args")
