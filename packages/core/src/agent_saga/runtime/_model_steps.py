"""Model calls are steps: ``patch_all()`` makes each OpenAI SDK call inside a saga a REVERSIBLE step.

The plugin behind the entry point ``openai`` of ``agent_saga_adapters`` (the core's own extra
``agent-saga[openai]`` declares the range, so ``patch_all`` checks it from metadata before this
module, which imports ``openai``, is loaded). It patches ``create`` of the SDK's chat completions
and responses resources, sync (``OpenAI``) and async (``AsyncOpenAI``), with the kit's
:class:`~agent_saga.adapter.Patches`, so ``unpatch_all`` restores exactly the originals.

Inside a saga a call is the step ``openai.chat.completions.create`` (or
``openai.responses.create``): its arguments are the request as the caller passed it, made plain
JSON (the client's headers, key included, are not part of it; ``extra_headers``, ``extra_query``
and ``timeout`` are transport and left out); its recorded result is the response as JSON, the
fields the server sent (``model_dump(mode="json", exclude_unset=True)``). A resumed ``@durable``
run is served that result from the log and gets it back as the SDK's own type
(``ChatCompletion`` / ``Response``, built as the SDK builds a response from the wire), so the
model is not asked again. Outside every saga the call passes straight through.

Not steps, passed through with a warning: ``stream=True`` (the stream is the caller's to consume;
recording it would mean holding it back until it ends), and the ``with_raw_response`` /
``with_streaming_response`` faces (the caller asked for the HTTP response, which the log cannot
give back). On resume those calls ask the model again.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from openai import APIError, NotGiven, Omit
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from agent_saga.adapter import Patches
from agent_saga.context import current_saga
from agent_saga.plugins.config import PatchConfig
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.toolspec import ToolSpec

__all__ = ["CHAT", "ORIGIN", "RESPONSES", "OpenAIModelCalls", "adapter", "request_of"]

#: The steps' origin (the log, observers): the span's ``gen_ai.system``.
ORIGIN = "openai"
CHAT = "openai.chat.completions.create"
RESPONSES = "openai.responses.create"
#: Options of the transport, not of the request: never logged, never compared on resume.
_TRANSPORT = frozenset({"extra_headers", "extra_query", "timeout"})
#: Set by the SDK's ``with_raw_response`` / ``with_streaming_response`` faces (openai._constants).
_RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"

Create = Callable[..., Any]


def _targets() -> list[tuple[type[Any], str, type[BaseModel], Callable[..., Create]]]:
    """(resource class, step name, response type, wrapper) of every ``create`` patched."""
    found: list[tuple[type[Any], str, type[BaseModel], Callable[..., Create]]] = [
        (Completions, CHAT, ChatCompletion, _sync_create), (AsyncCompletions, CHAT, ChatCompletion, _async_create),
    ]
    try:  # the Responses API came with openai 1.66; the extra allows older
        from openai.resources.responses import AsyncResponses, Responses
        from openai.types.responses import Response
    except ImportError:  # pragma: no cover - only with openai < 1.66
        return found
    return [*found, (Responses, RESPONSES, Response, _sync_create), (AsyncResponses, RESPONSES, Response, _async_create)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    # Not JSON and not the SDK's: recorded by its type, the same on every run (never a repr with an address).
    return {"$type": f"{type(value).__module__}.{type(value).__qualname__}"}


def request_of(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The request as the log records it and a resume compares it: plain JSON, transport left out."""
    kept = {k: v for k, v in kwargs.items() if k not in _TRANSPORT and not isinstance(v, (NotGiven, Omit))}
    plain: dict[str, Any] = json.loads(json.dumps(kept, default=_jsonable, sort_keys=True))
    return plain


def _materialised(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with one-shot iterators made lists: the log reads them, and the SDK still needs them."""
    return {k: list(v) if isinstance(v, Iterator) else v for k, v in kwargs.items()}


def _passes_through(tool: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether this call is not a step: outside every saga, streamed, or a raw-response face (warned)."""
    if current_saga() is None:
        return True
    headers = kwargs.get("extra_headers")
    if kwargs.get("stream") is True:
        why = "stream=True: the stream is the caller's to consume"
    elif isinstance(headers, Mapping) and _RAW_RESPONSE_HEADER in headers:
        why = "a with_raw_response/with_streaming_response call wants the HTTP response, which the log cannot give back"
    else:
        return False
    warnings.warn(f"agent-saga: {tool} is not a saga step here ({why}); it is not recorded and asks the model "
                  "again on resume", RuntimeWarning, stacklevel=3)
    return True


def _spec(tool: str) -> ToolSpec:
    # A failed model call changed nothing in the world (an error status, or no answer at all):
    # NOT_APPLIED, not UNKNOWN, so it leaves nothing in doubt for a rollback or a resume to settle.
    # The caller still gets the SDK's own exception.
    return ToolSpec.of(tool, semantics="REVERSIBLE", origin=ORIGIN, not_applied_on=(APIError,))


def _served(response_type: type[BaseModel], recorded: Any) -> Any:
    """The recorded response as the SDK's own type, built the way the SDK builds one from the wire.

    The SDK's ``model_construct`` (nested models included, unchecked) rather than ``model_validate``:
    a response the SDK accepted may not validate (a field this SDK version requires that the server
    left out, as a compatible server's Responses usage leaves ``cache_write_tokens``), and the served
    value must be what the live call returned. The result is recorded with ``exclude_unset``, so the
    fields set are the same too: a framework that turns a response into the next request with
    ``model_dump(exclude_unset=True)`` (OpenAI Agents does) then sends the same request on resume.
    """
    return response_type.model_construct(**recorded)


def _sync_create(tool: str, response_type: type[BaseModel], original: Create) -> Create:
    spec = _spec(tool)

    @functools.wraps(original)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _passes_through(tool, kwargs):
            return original(self, *args, **kwargs)
        kwargs = _materialised(kwargs)
        live: list[Any] = []

        def forward(**_request: Any) -> Any:
            response = original(self, *args, **kwargs)
            live.append(response)
            return response.model_dump(mode="json", exclude_unset=True)

        result = spec.call_sync(forward, (), request_of(kwargs))
        return live[0] if live else _served(response_type, result)

    return create


def _async_create(tool: str, response_type: type[BaseModel], original: Callable[..., Awaitable[Any]]) -> Create:
    spec = _spec(tool)

    @functools.wraps(original)
    async def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _passes_through(tool, kwargs):
            return await original(self, *args, **kwargs)
        kwargs = _materialised(kwargs)
        live: list[Any] = []

        async def forward(**_request: Any) -> Any:
            response = await original(self, *args, **kwargs)
            live.append(response)
            return response.model_dump(mode="json", exclude_unset=True)

        result = await spec.call_async(forward, (), request_of(kwargs))
        return live[0] if live else _served(response_type, result)

    return create


class OpenAIModelCalls:
    """The plugin: patches the SDK's ``create`` methods on ``patch_all()``, restores them on ``unpatch_all()``."""

    #: Read by ``patch_all``: these patches make model calls steps, not tools, so a missing tool policy
    #: is not said of them.
    patches_tools = False

    def __init__(self) -> None:
        self.patches = Patches()

    @hookimpl
    def agent_saga_patch(self, config: PatchConfig) -> list[str]:
        for owner, tool, response_type, wrap in _targets():
            self.patches.apply(owner, "create", functools.partial(wrap, tool, response_type))
        return self.patches.targets()

    @hookimpl
    def agent_saga_unpatch(self) -> list[str]:
        return self.patches.revert()


adapter = OpenAIModelCalls()
