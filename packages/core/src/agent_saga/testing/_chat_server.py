"""A local server that speaks the Chat Completions API (and the Responses API), for testing through the real SDK.

It answers each model from a script (text, tool calls, token counts) and keeps every
request it received, so a test can assert what the client actually sent: the model,
the messages (the cascade's feedback included), the tools and the Authorization
header. ``/v1/responses`` answers from the same script, as a Responses API response. Standard library only (a :class:`JSONServer`); it listens on 127.0.0.1 at a free port::

    with ChatServer({"local-7b": [Reply(tool_calls=[("send_emial", {"to": "a@b"})])]}) as server:
        tier = OpenAICompatibleTier("local-7b", "local-7b", base_url=server.base_url)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_saga.testing._json_server import JSONServer

__all__ = ["ChatServer", "Received", "Reply"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text and/or tool calls ``(name, arguments)``, and its usage."""

    text: str | None = None
    tool_calls: Sequence[tuple[str, Any]] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 5


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: Mapping[str, Any] = field(default_factory=dict)


class ChatServer(JSONServer):
    """Serves ``script`` (model name -> replies, taken in order; the last one repeats)."""

    thread_name = "chat-server"

    def __init__(self, script: Mapping[str, Sequence[Reply]], *, api_key: str | None = None) -> None:
        self.script = {model: list(replies) for model, replies in script.items()}
        self.api_key = api_key
        self.received: list[Received] = []
        self._served: dict[str, int] = {}
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.address}/v1"

    def requests_for(self, model: str) -> list[Received]:
        return [r for r in self.received if r.body.get("model") == model]

    def answer(self, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Mapping[str, Any]]:
        if body is None:
            return 400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}
        with self._lock:
            self.received.append(Received(path, headers, body))
        route = path.rstrip("/")
        if not route.endswith(("/chat/completions", "/responses")):
            return 404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}}
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "invalid api key", "type": "invalid_request_error",
                                   "code": "invalid_api_key"}}
        model = str(body.get("model"))
        with self._lock:
            replies = self.script.get(model)
            if not replies:
                return 404, {"error": {"message": f"model {model!r} not served here", "type": "invalid_request_error",
                                       "code": "model_not_found"}}
            n = self._served.get(model, 0)
            self._served[model] = n + 1
        reply = replies[min(n, len(replies) - 1)]
        return 200, (_response if route.endswith("/responses") else _completion)(model, n, reply)


def _completion(model: str, n: int, reply: Reply) -> dict[str, Any]:
    """The ``n``-th answer of ``model`` as a Chat Completions response."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": _arguments(args)}}
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{model}-{n}", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
    }


def _response(model: str, n: int, reply: Reply) -> dict[str, Any]:
    """The same answer as a Responses API response: a message item and/or function-call items."""
    output: list[dict[str, Any]] = []
    if reply.text is not None:
        output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    output.extend(
        {"type": "function_call", "id": f"fc_{n}_{i}", "call_id": f"call_{n}_{i}", "name": name,
         "arguments": _arguments(args), "status": "completed"}
        for i, (name, args) in enumerate(reply.tool_calls)
    )
    return {
        "id": f"resp-{model}-{n}", "object": "response", "created_at": 0, "model": model, "status": "completed",
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)
