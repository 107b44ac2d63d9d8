"""A LangChain chat model's calls as saga steps: :func:`wrap_chat_model` puts a recording model around one.

LangChain's callbacks (``on_chat_model_start`` / ``on_llm_end``) see a model call but cannot
answer it, so a resume could not be served from them. :class:`SagaChatModel` is a
``BaseChatModel`` around the user's model: its ``_generate`` / ``_agenerate`` (the methods every
chat model implements, called by ``invoke`` / ``ainvoke`` and by LangGraph's nodes) call the
inner model's, inside a saga as the REVERSIBLE step ``langchain.chat_model.generate``. Its
arguments are the messages (``messages_to_dict``, without each message's ``id``, which LangGraph
and LangChain make up afresh each run), ``stop`` and the bound keywords (the tools
``bind_tools`` gave, ``tool_choice``) as JSON; its result is the ``ChatResult`` (each generation's
message by ``message_to_dict``), which a resumed ``@durable`` run is served and gets back as
LangChain's own messages: the inner model is not asked again. Outside every saga a call passes
straight through. The wrapper has no ``_stream``, so LangChain asks it for whole answers, also
when a graph streams.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    message_to_dict,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding

from agent_saga import current_saga
from agent_saga.adapter import ToolSpec

__all__ = ["STEP", "SagaChatModel", "request_of", "wrap_chat_model"]

#: The step's name in the log (the tool a resume matches a call by).
STEP = "langchain.chat_model.generate"
_SPEC = ToolSpec.of(STEP, semantics="REVERSIBLE", origin="langchain")


def _type_of(value: Any) -> dict[str, str]:
    # Not JSON: recorded by its type, the same on every run (never a repr with an address).
    return {"$type": f"{type(value).__module__}.{type(value).__qualname__}"}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_type_of, sort_keys=True))


def request_of(messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call as the log records it and a resume compares it: JSON, without the per-run message ids."""
    dumped = messages_to_dict(messages)
    plain = [{**m, "data": {k: v for k, v in m["data"].items() if k != "id"}} for m in dumped]
    return {"messages": _plain(plain), "stop": stop, "options": _plain(kwargs)}


def _recorded(result: ChatResult) -> dict[str, Any]:
    generations = [{"message": message_to_dict(g.message), "generation_info": g.generation_info}
                   for g in result.generations]
    plain: dict[str, Any] = _plain({"generations": generations, "llm_output": result.llm_output})
    return plain


def _served(recorded: dict[str, Any]) -> ChatResult:
    generations = [ChatGeneration(message=messages_from_dict([g["message"]])[0], generation_info=g["generation_info"])
                   for g in recorded["generations"]]
    return ChatResult(generations=generations, llm_output=recorded["llm_output"])


class SagaChatModel(BaseChatModel):
    """A chat model whose calls are saga steps inside a saga (``langchain.chat_model.generate``), served on resume."""

    inner: BaseChatModel
    """The model that answers live calls."""

    @property
    def _llm_type(self) -> str:
        return f"agent-saga:{self.inner._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return dict(self.inner._identifying_params)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """The inner model's ``bind_tools``, bound to this wrapper, so the tools reach the step and the inner model."""
        bound = self.inner.bind_tools(tools, **kwargs)
        if bound is self.inner:  # a model that takes its tools from elsewhere
            return self
        if isinstance(bound, RunnableBinding) and bound.bound is self.inner:
            return self.bind(**bound.kwargs)
        raise TypeError(
            f"wrap_chat_model: {type(self.inner).__name__}.bind_tools returned a {type(bound).__name__}, not the "
            "model bound to keywords; wrap the model bind_tools returns instead, or call the tool-bound model outside"
        )

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        if current_saga() is None:
            return self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        live: list[ChatResult] = []

        def forward(**_request: Any) -> Any:
            result = self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            live.append(result)
            return _recorded(result)

        recorded = _SPEC.call_sync(forward, (), request_of(messages, stop, kwargs))
        return live[0] if live else _served(recorded)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        if current_saga() is None:
            return await self.inner._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        live: list[ChatResult] = []

        async def forward(**_request: Any) -> Any:
            result = await self.inner._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            live.append(result)
            return _recorded(result)

        recorded = await _SPEC.call_async(forward, (), request_of(messages, stop, kwargs))
        return live[0] if live else _served(recorded)


def wrap_chat_model(model: BaseChatModel) -> SagaChatModel:
    """``model`` with each call a saga step (a ``SagaChatModel`` as is): use it where the graph calls the model."""
    return model if isinstance(model, SagaChatModel) else SagaChatModel(inner=model)
