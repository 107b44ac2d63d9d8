"""Drive google-genai's real automatic function calling against the local :class:`GeminiServer`.

A client is made per run, for Vertex AI (``vertexai=True``, a project, a location and OAuth
credentials: a bearer token) or for the Gemini Developer API (an API key), and closed after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from gemini_server import LOCATION, PROJECT, GeminiServer
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials

__all__ = ["API_KEY", "TOKEN", "client", "config", "function_responses", "run_async"]

API_KEY, TOKEN = "gemini-test-key-3VwQ", "ya29.vertex-test-token-8HkP"


def client(server: GeminiServer, *, vertex: bool) -> genai.Client:
    """A client of the local server: Vertex AI's endpoint and credentials, or the Gemini API's."""
    options = types.HttpOptions(base_url=server.base_url)
    if vertex:
        return genai.Client(vertexai=True, project=PROJECT, location=LOCATION, credentials=Credentials(token=TOKEN),
                            http_options=options)
    return genai.Client(api_key=API_KEY, http_options=options)


def config(tools: list[Any]) -> types.GenerateContentConfig:
    """AFC over ``tools`` (plain Python functions), with room for every scripted turn."""
    return types.GenerateContentConfig(
        tools=tools, automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=20))


@contextlib.contextmanager
def closing(made: genai.Client) -> Iterator[genai.Client]:
    try:
        yield made
    finally:
        made.close()


def run_async(made: genai.Client, call: Callable[[genai.Client], Awaitable[Any]]) -> Any:
    """``call(client)`` on a loop of its own, the async client closed before the loop ends."""

    async def go() -> Any:
        try:
            return await call(made)
        finally:
            await made.aio.aclose()

    with closing(made):
        return asyncio.run(go())


def function_responses(server: GeminiServer, model: str) -> list[str]:
    """What the tools answered the model, as the SDK sent it (error results included)."""
    requests = server.requests_for(model)
    return [json.dumps(r["response"]) for r in requests[-1].function_responses()] if requests else []
