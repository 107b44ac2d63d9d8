"""Decision drivers: who picks the next step.

A driver sees a :class:`~agent_saga_temporal.model.Situation` (the goal, the facts, the
steps done and only the options allowed now) and returns one
:class:`~agent_saga_temporal.model.Proposal`. It runs inside an activity, so its answer
is recorded in the workflow's history and a replay reads it instead of asking again.
Whatever it returns, the workflow judges it; a driver cannot widen what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agent_saga import ConfigurationError, Tier
from agent_saga_temporal.model import FINISH, Proposal, Situation, StepOption

__all__ = ["Driver", "ModelDriver", "ScriptedDriver"]


@runtime_checkable
class Driver(Protocol):
    async def decide(self, situation: Situation) -> Proposal: ...


class ScriptedDriver:
    """Answers from a script, one entry per turn (turn 1 reads the first entry).

    An entry is a step name (picked with the arguments offered for it) or a whole
    :class:`Proposal` (for tests that forge one). Past the script's end it proposes
    ``finish``. Keyed by turn, so a retried decision gives the same answer.
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
    f"Choose {FINISH!r} when the goal is reached."
)


class ModelDriver:
    """Asks a chat model: a cascade tier, or an OpenAI-compatible client (``pip install 'agent-saga-temporal[model]>=3.0.0.dev0'``).

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
                    "ModelDriver needs an OpenAI-compatible client: pip install 'agent-saga-temporal[model]>=3.0.0.dev0' "
                    "or pass client="
                ) from err
            made: Any = AsyncOpenAI()  # reads OPENAI_API_KEY and OPENAI_BASE_URL
            client = made
        self.client = client
        self.model = model
        self.temperature = temperature

    def messages(self, situation: Situation) -> list[dict[str, str]]:
        view = {
            "goal": situation.goal,
            "facts": situation.facts,
            "done": situation.done,
            "options": [_option_view(o) for o in situation.options],
            "refused_before": [{"choice": r.choice, "why": r.refusal} for r in situation.refusals],
        }
        return [
            {"role": "system", "content": _INSTRUCTIONS},
            {"role": "user", "content": json.dumps(view, sort_keys=True)},
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
            return Proposal("<unreadable>", {}, 0.0, f"the model's answer is not the JSON asked for: {text[:200]!r}")
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
