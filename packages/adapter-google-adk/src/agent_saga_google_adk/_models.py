"""Google ADK's model calls as saga steps: :func:`wrap_llm` puts a recording model around an agent's ``BaseLlm``.

ADK asks its model for a turn with ``BaseLlm.generate_content_async(llm_request, stream)``, an
async generator. :class:`SagaLlm` is a ``BaseLlm`` around the agent's: a non-streamed turn inside
a saga is the REVERSIBLE step ``google_adk.generate_content``, whose arguments are the
``LlmRequest`` as JSON (:func:`request_of`) and whose result is every ``LlmResponse`` the inner
model yielded, as JSON; a resumed ``@durable`` run is served those responses from the log,
rebuilt as ``LlmResponse``, and the inner model is not asked again. Outside every saga, and for
a streamed turn (``stream=True``: the responses are the caller's as they arrive), the turn passes
straight through, unrecorded.

ADK's ``before_model_callback`` could skip the model by returning a response, but the step must
hold the call itself to record its answer and serve it; a model around the model does both.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse

from agent_saga import current_saga
from agent_saga.adapter import ToolSpec

__all__ = ["STEP", "SagaLlm", "request_of", "wrap_llm"]

#: The step's name in the log (the tool a resume matches a turn by).
STEP = "google_adk.generate_content"
_SPEC = ToolSpec.of(STEP, semantics="REVERSIBLE", origin="google_adk")


def request_of(llm_request: LlmRequest) -> dict[str, Any]:
    """The request as the log records it and a resume compares it: JSON, unset fields left out.

    The tools ADK holds for the turn (``tools_dict``) are not part of it; their declarations, in
    ``config``, are. ADK itself takes the function call ids it made up (``adk-<uuid>``, new each
    run) out of the contents before the model sees them, so they are not here either.
    """
    plain: dict[str, Any] = llm_request.model_dump(mode="json", exclude_none=True)
    return plain


class SagaLlm(BaseLlm):
    """A model whose non-streamed turns are saga steps inside a saga (``google_adk.generate_content``), served on resume."""

    inner: BaseLlm
    """The model that answers live turns."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if stream or current_saga() is None:
            async for response in self.inner.generate_content_async(llm_request, stream=stream):
                yield response
            return
        live: list[LlmResponse] = []

        async def forward(**_request: Any) -> Any:
            async for response in self.inner.generate_content_async(llm_request, stream=False):
                live.append(response)
            return [response.model_dump(mode="json", exclude_none=True) for response in live]

        recorded = await _SPEC.call_async(forward, (), request_of(llm_request))
        for response in live or [LlmResponse.model_validate(each) for each in recorded]:
            yield response


def wrap_llm(model: BaseLlm) -> SagaLlm:
    """``model`` with each non-streamed turn a saga step (a ``SagaLlm`` as is): ``Agent(model=wrap_llm(model), ...)``."""
    return model if isinstance(model, SagaLlm) else SagaLlm(model=model.model, inner=model)
