"""A local server that speaks ``generateContent`` as Vertex AI and the Gemini Developer API do.

The real ``google-genai`` client talks to it over HTTP (``HttpOptions(base_url=...)``): its
request building, response parsing and automatic function calling all run for real. Each
model name is a script of the model's turns; the turn a request is answering is the number
of model turns already in its ``contents`` (as a real model sees it: the conversation so far),
so a script needs no state between requests. After the last scripted turn the model says
"done". Every request is kept, so a test can assert what the SDK sent (the declarations, the
function responses, the credentials). A :class:`~agent_saga.testing.JSONServer`: 127.0.0.1 at a free port.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_saga.testing import JSONServer

__all__ = ["PROJECT", "GeminiServer", "Received", "Turn"]

#: The project and location a Vertex AI client names in its paths here.
PROJECT, LOCATION = "saga-test", "us-central1"
# Any API version (v1, v1beta, v1beta1: which one a release of the SDK uses differs).
_GEMINI = re.compile(r"^/v1\w*/models/(?P<model>[^/:]+):generateContent$")
_VERTEX = re.compile(
    rf"^/v1\w*/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/(?P<model>[^/:]+):generateContent$"
)

#: One model turn: the calls ``(name, args)`` it makes (several: one response, several calls).
Turn = Sequence[tuple[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    api: str  # "gemini" or "vertex", by the path it came on
    headers: Mapping[str, str]  # names lower-cased
    body: Mapping[str, Any] = field(default_factory=dict)

    def function_responses(self) -> list[dict[str, Any]]:
        """The ``functionResponse`` parts the client sent back (what the tools answered)."""
        return [part["functionResponse"] for content in self.body.get("contents", ())
                for part in content.get("parts", ()) if "functionResponse" in part]


class GeminiServer(JSONServer):
    """Serves scripts registered with :meth:`script`; every request is kept."""

    thread_name = "gemini-server"

    def __init__(self, *, api_key: str | None = None, token: str | None = None) -> None:
        self.api_key, self.token = api_key, token
        self.received: list[Received] = []
        self._scripts: dict[str, list[Turn]] = {}
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.address

    def script(self, turns: Sequence[Turn]) -> str:
        """A fresh model name whose turns are ``turns``, then "done"."""
        model = f"gemini-scripted-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._scripts[model] = list(turns)
        return model

    def requests_for(self, model: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if model in r.path]

    def answer(self, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Mapping[str, Any]]:
        if body is None:
            return 400, {"error": {"code": 400, "message": "the body is not JSON", "status": "INVALID_ARGUMENT"}}
        path = path.split("?", 1)[0]
        route = _GEMINI.match(path) or _VERTEX.match(path)
        api = "gemini" if _GEMINI.match(path) else "vertex"
        with self._lock:
            self.received.append(Received(path, api, headers, body))
        if route is None:
            return 404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}}
        if not self._authorised(api, headers):
            return 401, {"error": {"code": 401, "message": "bad credentials", "status": "UNAUTHENTICATED"}}
        return self._turn(route["model"], body)

    def _turn(self, model: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            turns = self._scripts.get(model)
        if turns is None:
            return 404, {"error": {"code": 404, "message": f"model {model!r} not served here", "status": "NOT_FOUND"}}
        turn = sum(1 for content in body.get("contents", ()) if content.get("role") == "model")
        parts: list[dict[str, Any]] = (
            [{"functionCall": {"name": name, "args": dict(args)}} for name, args in turns[turn]]
            if turn < len(turns) else [{"text": "done"}]
        )
        return 200, {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": model,
        }

    def _authorised(self, api: str, headers: Mapping[str, str]) -> bool:
        if api == "gemini":
            return self.api_key is None or headers.get("x-goog-api-key") == self.api_key
        return self.token is None or headers.get("authorization") == f"Bearer {self.token}"
