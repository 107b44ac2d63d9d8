"""Pydantic AI's model calls as saga steps: :func:`wrap_model` puts a recording model around an agent's model.

Every request a Pydantic AI run makes goes through ``Model.request(messages, model_settings,
model_request_parameters)``; :class:`SagaModel` is a ``WrapperModel`` (Pydantic AI's own base
for a model around another) whose ``request`` is, inside a saga, the REVERSIBLE step
``pydantic_ai.model.request``. Its arguments are the request as JSON (:func:`request_of`); its
result is the ``ModelResponse`` dumped by Pydantic AI's ``ModelMessagesTypeAdapter``, which a
resumed ``@durable`` run is served and gets back, validated by the same adapter, as a real
``ModelResponse``: the wrapped model is not asked again. Outside every saga a request passes
straight through.

Streamed requests (``request_stream``: ``agent.run_stream``, ``agent.iter`` with streaming) are
not steps: the wrapper hands them to the wrapped model unchanged, and a resume asks the model again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import exceptions
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import KnownModelName, Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from agent_saga import current_saga
from agent_saga.adapter import ToolSpec

__all__ = ["STEP", "SagaModel", "request_of", "wrap_model"]

#: The step's name in the log (the tool a resume matches a request by).
STEP = "pydantic_ai.model.request"

#: Fields of a message, and of each of its parts, that Pydantic AI sets afresh on every run
#: (clock readings, the run's and conversation's generated ids): left out of the request the log
#: compares, or a resumed run would differ from its record at its first request. Only these
#: levels are touched: a tool's arguments or a prompt that holds a key of the same name are kept.
_PER_RUN = frozenset({"timestamp", "request_timestamp", "duration", "run_id", "conversation_id"})
#: Settings of the transport, not of the request: never logged (headers may carry a key), never compared.
_TRANSPORT = frozenset({"extra_headers", "timeout"})
#: A failed request changed nothing in the world: NOT_APPLIED, so a rollback or a resume has nothing in doubt.
#: ``ModelAPIError`` (every provider's failure) where the release has it, else its HTTP subclass.
_FAILED: type[BaseException] = getattr(exceptions, "ModelAPIError", exceptions.ModelHTTPError)

_PARAMETERS: TypeAdapter[ModelRequestParameters] = TypeAdapter(ModelRequestParameters)
_SPEC = ToolSpec.of(STEP, semantics="REVERSIBLE", origin="pydantic_ai", not_applied_on=(_FAILED,))


def _stable(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in _PER_RUN}


def request_of(
    messages: list[ModelMessage], settings: ModelSettings | None, parameters: ModelRequestParameters,
) -> dict[str, Any]:
    """The request as the log records it and a resume compares it: JSON, the same on every run of the same code.

    ``messages`` as ``ModelMessagesTypeAdapter`` dumps them, less each message's and part's
    per-run fields (:data:`_PER_RUN`); ``settings`` less the transport's; ``parameters`` (tool
    definitions, output mode, instructions) as Pydantic AI dumps them.
    """
    dumped = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    plain = [{**_stable(message), "parts": [_stable(part) for part in message.get("parts", ())]} for message in dumped]
    kept = {k: v for k, v in (settings or {}).items() if k not in _TRANSPORT}
    return {
        "messages": plain,
        "settings": TypeAdapter(dict[str, Any]).dump_python(kept, mode="json"),
        "parameters": _PARAMETERS.dump_python(parameters, mode="json"),
    }


class SagaModel(WrapperModel):
    """A model whose requests are saga steps inside a saga (``pydantic_ai.model.request``), served on resume."""

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        if current_saga() is None:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)
        live: list[ModelResponse] = []

        async def forward(**_request: Any) -> Any:
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
            live.append(response)
            return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]

        recorded = await _SPEC.call_async(forward, (), request_of(messages, model_settings, model_request_parameters))
        if live:
            return live[0]
        (served,) = ModelMessagesTypeAdapter.validate_python([recorded])
        if not isinstance(served, ModelResponse):  # a log written by other code: say so rather than hand on a request
            raise TypeError(f"{STEP}: the recorded result is a {type(served).__name__}, not a ModelResponse")
        return served


def wrap_model(model: Model | KnownModelName | str) -> SagaModel:
    """``model`` (a ``Model`` or a name Pydantic AI knows) with each request a saga step; a ``SagaModel`` as is.

    ``Agent(wrap_model(model), ...)``, or per run ``agent.run(prompt, model=wrap_model(model))``.
    """
    return model if isinstance(model, SagaModel) else SagaModel(model)
