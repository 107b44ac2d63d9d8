"""Verifiers: the evidence a tier's answer must pass before the cascade returns it.

A verifier is a callable ``(answer: TierAnswer) -> Verdict`` (or an async one). A
rejection carries the specific reason, because that reason is what the next tier is
told and what the log keeps. The reasons quote what the model wrote (a tool name, a
value); it is data, rendered inert wherever a person reads it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from inspect import isawaitable
from typing import TYPE_CHECKING, Any

from agent_saga.errors import ConfigurationError
from agent_saga.inert import clip
from agent_saga.runtime._broker import ContextBroker
from agent_saga.runtime._tiers import TierAnswer

if TYPE_CHECKING:
    from agent_saga.runtime._grounding import Claim, Entails

__all__ = ["Verdict", "Verifier", "all_of", "grounded", "judge", "matches_schema", "tools_must_exist"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Passed (``ok``) or rejected, and why (a rejection always says why)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def accept(cls) -> Verdict:
        return cls(True, "")

    @classmethod
    def reject(cls, reason: str) -> Verdict:
        return cls(False, reason or "rejected (the verifier gave no reason)")


Verifier = Callable[[TierAnswer], "Verdict | Awaitable[Verdict]"]


async def judge(verifier: Verifier, answer: TierAnswer) -> Verdict:
    """Run ``verifier`` on ``answer`` (sync or async); anything but a Verdict is a configuration error."""
    verdict: Any = verifier(answer)
    if isawaitable(verdict):
        verdict = await verdict
    if not isinstance(verdict, Verdict):
        raise ConfigurationError(
            f"a verifier returns a Verdict (Verdict.accept() or Verdict.reject(reason)), {verifier!r} "
            f"returned {type(verdict).__name__}"
        )
    return verdict


def tools_must_exist(names: Iterable[str]) -> Verifier:
    """Reject an answer that calls a tool not in ``names`` (a misspelt or invented tool)."""
    if isinstance(names, str):
        raise ConfigurationError(f"tools_must_exist takes a collection of tool names, not one str ({names!r})")
    known = frozenset(names)
    for name in known:
        if not isinstance(name, str):
            raise ConfigurationError(f"tools_must_exist takes tool names (str), got {name!r}")

    def tools_exist(answer: TierAnswer) -> Verdict:
        unknown = list(dict.fromkeys(c.name for c in answer.tool_calls if c.name not in known))
        if unknown:
            return Verdict.reject(f"called tool(s) that do not exist: {unknown}")
        return Verdict.accept()

    return tools_exist


def matches_schema(schema: Mapping[str, Any]) -> Verifier:
    """Reject an answer whose text is not JSON valid against ``schema`` (JSON Schema).

    Uses ``jsonschema`` (``pip install 'agent-saga[schema]>=3.0.0'``); the schema itself is
    checked here, so a broken schema fails at start-up rather than rejecting every tier.
    """
    # Not runtime/_schema.py's subset: a cascade's answer schema is the user's full JSON Schema
    # (and is itself validated), which needs jsonschema -- an extra, so repair cannot use it.
    try:
        import jsonschema
        from jsonschema.validators import validator_for
    except ImportError as err:
        raise ConfigurationError("matches_schema needs jsonschema: pip install 'agent-saga[schema]>=3.0.0'") from err
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"matches_schema takes a JSON Schema (a mapping), got {type(schema).__name__}")
    schema = dict(schema)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ConfigurationError(f"matches_schema: the schema is not valid JSON Schema: {err.message}") from None
    validator = cls(schema)

    def schema_holds(answer: TierAnswer) -> Verdict:
        try:
            value = json.loads(answer.text)
        except json.JSONDecodeError as err:
            return Verdict.reject(f"the answer is not JSON ({err.msg} at char {err.pos})")
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            where = error.json_path
            return Verdict.reject(f"the answer does not match the schema at {where}: {error.message}")
        return Verdict.accept()

    return schema_holds


def grounded(broker: ContextBroker, *, entails: Entails | None = None) -> Verifier:
    """Reject an answer that :func:`agent_saga.runtime.ground` does not find fully grounded.

    The reason names each claim that is not VERIFIED, with its status (UNCITED,
    BROKEN_CITATION, ...), so the next tier knows which sentence lacked its evidence.
    Inside a saga each check is also an ANSWER_GROUNDED record.
    """
    # Imported here: grounding is a sibling built on the broker, needed only by this verifier.
    from agent_saga.runtime._grounding import ground

    def answer_grounded(answer: TierAnswer) -> Verdict:
        report = ground(answer.text, broker, entails=entails)
        if report.fully_grounded:
            return Verdict.accept()
        weak = [c for c in report.claims if c.status != "VERIFIED"]
        if not weak:  # nothing to check is not the same as everything checked
            return Verdict.reject("the answer is not fully grounded: it has no claim to verify")
        shown = "; ".join(f"{c.status}: {_claim_text(c)!r}" for c in weak[:5])
        more = f" (and {len(weak) - 5} more)" if len(weak) > 5 else ""
        return Verdict.reject(f"the answer is not fully grounded: {len(weak)} claim(s) not verified: {shown}{more}")

    return answer_grounded


def _claim_text(claim: Claim) -> str:
    return clip(claim.text, 80)


def all_of(*verifiers: Verifier) -> Verifier:
    """Pass only when every verifier passes; a rejection names every verifier that said no."""
    if not verifiers:
        raise ConfigurationError("all_of needs at least one verifier")
    for verifier in verifiers:
        if not callable(verifier):
            raise ConfigurationError(f"all_of takes verifiers (callables answer -> Verdict), got {verifier!r}")

    async def every(answer: TierAnswer) -> Verdict:
        reasons = [v.reason for v in [await judge(f, answer) for f in verifiers] if not v.ok]
        return Verdict.reject("; ".join(reasons)) if reasons else Verdict.accept()

    return every
