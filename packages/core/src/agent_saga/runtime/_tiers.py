"""A tier of the cascade: one model behind one small interface.

A tier is any object with a ``name`` and ``async def complete(request, feedback=None)``
returning a :class:`TierAnswer` (text, tool calls, tokens). The request is what the
caller asks, in one of three shapes every tier should accept:

* a ``str``: the user's words;
* a sequence of chat messages (``{"role": ..., "content": ...}``);
* a mapping with ``"messages"`` and optionally ``"tools"`` (OpenAI function-tool specs)
  and ``"response_format"``.

``feedback`` is None for the first tier; for a later one it is the specific reason the
previous tier's answer was rejected, so the next model does not repeat the mistake.

:class:`OpenAICompatibleTier` speaks the Chat Completions API through the official
``openai`` SDK (``pip install 'agent-saga[openai]>=3.0.0'``), so a local server (llama.cpp,
vLLM, Ollama) and a hosted one are both one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent_saga.credentials import CredentialError, is_credential_ref, resolve_credentials
from agent_saga.errors import ConfigurationError
from agent_saga.redaction import remember_secret

__all__ = ["OpenAICompatibleTier", "Tier", "TierAnswer", "ToolCall", "answer_of", "chat_messages", "feedback_message"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked to call. ``arguments`` is {} when the model's JSON did not parse
    (``raw_arguments`` keeps what it wrote)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""
    raw_arguments: str = ""


@dataclass(frozen=True, slots=True)
class TierAnswer:
    """What one tier answered, and what it cost (tokens as the model's server counted them)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tokens: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ConfigurationError(f"TierAnswer.text must be a str, got {type(self.text).__name__}")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise ConfigurationError(f"TierAnswer.tokens must be an int >= 0, got {self.tokens!r}")
        calls = tuple(self.tool_calls)
        for call in calls:
            if not isinstance(call, ToolCall):
                raise ConfigurationError(f"TierAnswer.tool_calls holds ToolCall objects, got {call!r}")
        object.__setattr__(self, "tool_calls", calls)


@runtime_checkable
class Tier(Protocol):
    """One rung of the ladder."""

    name: str

    async def complete(self, request: Any, feedback: str | None = None) -> TierAnswer: ...


def feedback_message(feedback: str) -> dict[str, str]:
    """The message that tells the next model why the previous answer was refused."""
    return {
        "role": "user",
        "content": f"A previous answer to this request was rejected: {feedback}. Answer again without that fault.",
    }


def chat_messages(request: Any, feedback: str | None = None) -> list[dict[str, Any]]:
    """``request`` (any of the three shapes) as chat messages, with the feedback appended."""
    if isinstance(request, str):
        messages: list[dict[str, Any]] = [{"role": "user", "content": request}]
    elif isinstance(request, Mapping):
        if "messages" not in request:
            raise ConfigurationError(
                "a request given as a mapping needs a 'messages' list (and optionally 'tools'); "
                f"got keys {sorted(map(str, request))}"
            )
        messages = _messages(request["messages"])
    else:
        messages = _messages(request)
    if feedback is not None:
        messages.append(feedback_message(feedback))
    return messages


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ConfigurationError(
            f"a request is a str, a non-empty list of chat messages, or {{'messages': [...]}}; got {value!r:.80}"
        )
    out = []
    for message in value:
        if not isinstance(message, Mapping) or "role" not in message:
            raise ConfigurationError(f"a chat message is a mapping with a 'role', got {message!r:.80}")
        out.append(dict(message))
    return out


def _request_options(request: Any) -> dict[str, Any]:
    if not isinstance(request, Mapping):
        return {}
    return {key: request[key] for key in ("tools", "tool_choice", "response_format") if key in request}


class OpenAICompatibleTier:
    """A tier served by any endpoint that speaks the Chat Completions API.

    ``api_key`` is a credential reference (``credential_ref("openai")``), resolved through
    :func:`agent_saga.credentials.set_credential_resolver` when the first request is made;
    the resolved secret is scrubbed from any text the library writes. None reads
    ``OPENAI_API_KEY`` as the SDK does, or sends a placeholder (local servers need no key).
    """

    def __init__(
        self,
        name: str,
        model: str,
        *,
        base_url: str | None = None,
        api_key: Mapping[str, str] | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"OpenAICompatibleTier needs a non-empty name, got {name!r}")
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"OpenAICompatibleTier {name!r} needs a non-empty model, got {model!r}")
        if api_key is not None and not is_credential_ref(api_key):
            # Refused even when it is the right key: a secret in code ends up in logs and repos.
            raise CredentialError(
                f"OpenAICompatibleTier {name!r}: api_key takes credential_ref('<name>'), not a value; "
                "resolve it with set_credential_resolver()"
            )
        try:
            import openai  # noqa: F401 - only to fail here, at construction, when it is missing
        except ImportError as err:
            raise ConfigurationError(
                "OpenAICompatibleTier needs the openai SDK: pip install 'agent-saga[openai]>=3.0.0'"
            ) from err
        self.name = name
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: Any = None

    def __repr__(self) -> str:
        return f"OpenAICompatibleTier({self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    def _make_client(self) -> Any:
        from openai import AsyncOpenAI

        if self.api_key is not None:
            resolved, _ = resolve_credentials({"api_key": self.api_key})  # remembered, so scrubbed later
            key = str(resolved["api_key"])
        else:
            env_key = os.environ.get("OPENAI_API_KEY")
            if env_key:
                remember_secret(env_key)  # scrubbed wherever it turns up, like a resolved reference
            key = env_key or "no-key"  # local servers ask for none; the SDK insists on one
        return AsyncOpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries)

    async def aclose(self) -> None:
        """Close the HTTP client (a new one is made if the tier is used again)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def complete(self, request: Any, feedback: str | None = None) -> TierAnswer:
        if self._client is None:
            self._client = self._make_client()
        kwargs: dict[str, Any] = {"model": self.model, "messages": chat_messages(request, feedback)}
        kwargs.update(_request_options(request))
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        reply = await self._client.chat.completions.create(**kwargs)
        return answer_of(reply)


def answer_of(reply: Any) -> TierAnswer:
    """A Chat Completions reply (the SDK's object) as a :class:`TierAnswer`."""
    choices = getattr(reply, "choices", None) or []
    message = choices[0].message if choices else None
    text = str(getattr(message, "content", None) or "")
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is None:
            continue
        raw = str(getattr(function, "arguments", "") or "")
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        calls.append(ToolCall(str(function.name), parsed if isinstance(parsed, dict) else {},
                              str(getattr(call, "id", "") or ""), raw))
    usage = getattr(reply, "usage", None)
    tokens = getattr(usage, "total_tokens", None) if usage is not None else None
    return TierAnswer(text, tuple(calls), tokens if isinstance(tokens, int) and tokens >= 0 else 0)
