"""Decision drivers: who picks the next step.

A driver sees a :class:`~agent_saga_temporal.model.Situation` (the goal, the facts, the
steps done and only the options allowed now) and returns one
:class:`~agent_saga_temporal.model.Proposal`. It runs inside an activity, so its answer
is recorded in the workflow's history and a replay reads it instead of asking again.
Whatever it returns, the workflow judges it; a driver cannot widen what is allowed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agent_saga import ConfigurationError, Tier
from agent_saga_temporal.model import FINISH, Proposal, Situation, StepOption

__all__ = ["OPENROUTER_BASE_URL", "Driver", "ModelDriver", "Pick", "PydanticAIDriver", "ScriptedDriver"]

#: OpenRouter's OpenAI-compatible endpoint (``ModelDriver.openrouter``).
OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
#: Where ``ModelDriver.openrouter`` reads the key when none is given.
OPENROUTER_KEY_ENV = "OPENROUTER_API_KEY"
#: The choice of an answer that could not be read: never offered, so the workflow refuses it.
UNREADABLE = "<unreadable>"


@runtime_checkable
class Driver(Protocol):
    async def decide(self, situation: Situation) -> Proposal: ...


class ScriptedDriver:
    """Answers from a script, one entry per turn (turn 1 reads the first entry).

    An entry is a step name (picked with the arguments offered for it) or a whole
    :class:`Proposal` (for tests that forge one). ``finish`` stands for the job's
    finishing choice whatever the job calls it (``verify_order`` in the checkout), and
    past the script's end it proposes that. Keyed by turn, so a retried decision gives
    the same answer.
    """

    def __init__(self, script: Sequence[str | Proposal], *, confidence: float = 1.0) -> None:
        for entry in script:
            if not isinstance(entry, (str, Proposal)):
                raise ConfigurationError(f"a script entry is a step name or a Proposal, got {entry!r}")
        self.script = list(script)
        self.confidence = confidence

    async def decide(self, situation: Situation) -> Proposal:
        index = situation.turn - 1
        entry = self.script[index] if index < len(self.script) else FINISH
        if isinstance(entry, Proposal):
            return entry
        if entry == FINISH:
            entry = situation.finish
        offered = {o.choice: o for o in situation.options}
        option = offered.get(entry)
        # A scripted name that is not offered now is proposed anyway, as a model might:
        # the workflow refuses and records it.
        args = dict(option.args) if option is not None else {}
        return Proposal(entry, args, self.confidence, "scripted")


class _Completions(Protocol):
    async def create(self, **kwargs: Any) -> Any: ...


class _Chat(Protocol):
    completions: _Completions


class ChatClient(Protocol):
    """What the model driver needs of a client: ``openai.AsyncOpenAI`` or anything shaped like it."""

    chat: _Chat


_INSTRUCTIONS = (
    "You pick the next step of a job. Answer with one JSON object "
    '{"choice": <one of the option names>, "confidence": <0..1>, "reason": <short text>}. '
    "Choose only among the options listed; their arguments are fixed and not yours to change. "
    "Choose {finish!r} when the goal is reached."
)  # .replace, not .format: the JSON braces above are text


class ModelDriver:
    """Asks a chat model: a cascade tier, or an OpenAI-compatible client (``pip install 'agent-saga-temporal[model]>=3.0.0'``).

    ``ModelDriver(tier=OpenAICompatibleTier("local", "qwen", base_url=...))`` takes any tier of
    :func:`agent_saga.cascade` (an object with ``name`` and ``async complete(request, feedback)``);
    ``ModelDriver(client, model=...)`` takes ``openai.AsyncOpenAI`` or anything shaped like it.
    The model names an option; the proposal carries that option's offered arguments,
    so the model never writes an argument. An answer that names no option, or is not
    JSON, becomes a proposal the workflow refuses and records.
    """

    def __init__(self, client: ChatClient | None = None, *, model: str | None = None, tier: Tier | None = None,
                 temperature: float = 0.0) -> None:
        self.tier = tier
        self.client: ChatClient | None = None
        if tier is not None:
            if client is not None or model is not None:
                raise ConfigurationError("ModelDriver takes tier= or client=/model=, not both: the tier names its model")
            if not isinstance(getattr(tier, "name", None), str) or not callable(getattr(tier, "complete", None)):
                raise ConfigurationError(
                    f"ModelDriver(tier=...) needs a tier: an object with a str .name and async complete(); got {tier!r}"
                )
            self.model = tier.name
            self.temperature = temperature
            return
        if model is None:
            raise ConfigurationError("ModelDriver needs tier=<a cascade tier> or model=<the model's name>")
        if client is None:
            try:
                from openai import AsyncOpenAI
            except ImportError as err:
                raise ImportError(
                    "ModelDriver needs an OpenAI-compatible client: pip install 'agent-saga-temporal[model]>=3.0.0' "
                    "or pass client="
                ) from err
            made: Any = AsyncOpenAI()  # reads OPENAI_API_KEY and OPENAI_BASE_URL
            client = made
        self.client = client
        self.model = model
        self.temperature = temperature

    @classmethod
    def openrouter(
        cls, model: str, *, api_key: str | None = None, base_url: str = OPENROUTER_BASE_URL,
        app_url: str | None = None, app_title: str | None = None, temperature: float = 0.0,
    ) -> ModelDriver:
        """The driver on OpenRouter: its OpenAI-compatible endpoint, a model it routes (``"openai/gpt-4.1-mini"``).

        The key is ``api_key`` or ``$OPENROUTER_API_KEY``; ``app_url`` and ``app_title`` are sent
        as OpenRouter's optional ``HTTP-Referer`` and ``X-Title`` headers. Needs the openai SDK
        (``pip install 'agent-saga-temporal[model]>=3.0.0'``).
        """
        key = api_key if api_key is not None else os.environ.get(OPENROUTER_KEY_ENV)
        if not key:
            raise ConfigurationError(
                f"ModelDriver.openrouter needs an OpenRouter key: set {OPENROUTER_KEY_ENV} or pass api_key="
            )
        try:
            from openai import AsyncOpenAI
        except ImportError as err:
            raise ImportError(
                "ModelDriver.openrouter needs the openai SDK: pip install 'agent-saga-temporal[model]>=3.0.0'"
            ) from err
        headers = {name: value for name, value in (("HTTP-Referer", app_url), ("X-Title", app_title)) if value}
        client: Any = AsyncOpenAI(base_url=base_url, api_key=key, default_headers=headers or None)
        return cls(client, model=model, temperature=temperature)

    def messages(self, situation: Situation) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": instructions(situation)},
            {"role": "user", "content": situation_view(situation)},
        ]

    async def decide(self, situation: Situation) -> Proposal:
        if self.tier is not None:
            answer = await self.tier.complete(
                {"messages": self.messages(situation), "response_format": {"type": "json_object"}}
            )
            return self.parse(answer.text, situation.options)
        assert self.client is not None  # set whenever no tier is
        reply = await self.client.chat.completions.create(
            model=self.model,
            messages=self.messages(situation),
            temperature=self.temperature,
            response_format={"type": "json_object"},
        )
        return self.parse(str(reply.choices[0].message.content or ""), situation.options)

    @staticmethod
    def parse(text: str, options: Sequence[StepOption]) -> Proposal:
        try:
            answer = json.loads(text)
            choice = str(answer["choice"])
            confidence = float(answer.get("confidence", 0.0))
            reason = str(answer.get("reason", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return Proposal(UNREADABLE, {}, 0.0, f"the model's answer is not the JSON asked for: {text[:200]!r}")
        return _proposal(choice, confidence, reason, options)


@dataclass
class Pick:
    """What a Pydantic AI model answers: an option's name, how sure it is (0..1), and why. No arguments."""

    choice: str
    confidence: float
    reason: str = ""


class PydanticAIDriver:
    """Asks a `Pydantic AI <https://ai.pydantic.dev>`_ agent (``pip install 'agent-saga-temporal[pydantic-ai]>=3.0.0'``).

    ``model`` is anything ``pydantic_ai.Agent`` takes: a model name such as
    ``"openrouter:openai/gpt-4.1-mini"`` (Pydantic AI's OpenRouter provider, which reads
    ``$OPENROUTER_API_KEY``) or ``"openai:gpt-4.1-mini"``, or a ``Model`` object
    (``TestModel``, ``FunctionModel`` in tests). The agent's structured output is a
    :class:`Pick`, validated by Pydantic AI (which asks the model again, up to
    ``retries`` times, when it does not fit); the proposal carries the offered
    arguments of the picked option, so the model never writes one. An answer that
    never fits becomes a proposal the workflow refuses and records, as with
    :class:`ModelDriver`. The driver runs inside the decide activity, so its answer is
    recorded in the history and a replay does not ask again.
    """

    def __init__(self, model: Any, *, retries: int = 1, model_settings: Any = None) -> None:
        try:
            from pydantic_ai import Agent
        except ImportError as err:
            raise ImportError(
                "PydanticAIDriver needs Pydantic AI: pip install 'agent-saga-temporal[pydantic-ai]>=3.0.0'"
            ) from err
        if model is None:
            raise ConfigurationError("PydanticAIDriver needs a model: a Pydantic AI model name or Model object")
        self.agent: Any = Agent(model, output_type=Pick, retries=retries, model_settings=model_settings)

    async def decide(self, situation: Situation) -> Proposal:
        from pydantic_ai.exceptions import UnexpectedModelBehavior

        try:
            result = await self.agent.run(situation_view(situation), instructions=instructions(situation))
        except UnexpectedModelBehavior as err:
            return Proposal(UNREADABLE, {}, 0.0, f"the model's answer never fit the form asked for: {str(err)[:200]}")
        pick: Pick = result.output
        return _proposal(pick.choice, pick.confidence, pick.reason, situation.options)


def instructions(situation: Situation) -> str:
    """What every model-backed driver is told: pick one option, by name, with a confidence."""
    return _INSTRUCTIONS.replace("{finish!r}", repr(situation.finish))


def situation_view(situation: Situation) -> str:
    """The situation as the model sees it (JSON): the goal, the facts, the steps done, the options, past refusals."""
    view = {
        "goal": situation.goal,
        "facts": situation.facts,
        "done": situation.done,
        "options": [_option_view(o) for o in situation.options],
        "refused_before": [{"choice": r.choice, "why": r.refusal} for r in situation.refusals],
    }
    return json.dumps(view, sort_keys=True)


def _proposal(choice: str, confidence: float, reason: str, options: Sequence[StepOption]) -> Proposal:
    # The offered arguments of the named option; a name not offered keeps none (the workflow refuses it).
    offered = {o.choice: o for o in options}
    args = dict(offered[choice].args) if choice in offered else {}
    return Proposal(choice, args, confidence, reason)


def _option_view(option: StepOption) -> dict[str, Any]:
    return {
        "name": option.choice,
        "arguments": option.args,
        "semantics": option.semantics,
        "description": option.description,
    }
