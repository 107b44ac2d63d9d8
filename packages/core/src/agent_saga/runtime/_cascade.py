"""The cascade: ask the cheapest model first, escalate only on evidence.

``await cascade(request, ladder=[small, mid, frontier], verify=...)`` asks each tier in
turn. An answer the verifier rejects is never returned: the next tier gets the same
request plus the specific reason, and the rejected tier's tokens still count. The
first answer that passes is the result; if none does, :class:`CascadeExhausted` is
raised with the whole trace. Either way the ladder, failures included, becomes one
record in the saga's log: CASCADE_RESOLVED or CASCADE_EXHAUSTED.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any

from agent_saga.context import current_saga
from agent_saga.errors import ConfigurationError, SagaError
from agent_saga.ids import new_saga_id
from agent_saga.inert import inert
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument
from agent_saga.log.encodable import encodable
from agent_saga.log.records import RecordType
from agent_saga.redaction import scrub_text
from agent_saga.runtime._speculation import planned_calls
from agent_saga.runtime._tiers import Tier, TierAnswer
from agent_saga.runtime._verifiers import Verifier, judge

__all__ = ["Attempt", "CascadeExhausted", "CascadeResult", "cascade"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One tier's turn: what it cost and the verdict on its answer."""

    tier: str
    tokens: int
    seconds: float
    ok: bool
    reason: str = ""  # why it was rejected ("" when it passed)
    answer: TierAnswer | None = None  # None when the tier itself failed (raised)

    def line(self) -> str:
        mark = "ok" if self.ok else "->"
        text = f"  {mark:<4}{inert(self.tier):<18}{self.tokens:>5} tok  {self.seconds:.2f}s"
        return text if self.ok else f"{text}  rejected: {inert(self.reason)}"

    def as_record(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"tier": self.tier, "tokens": self.tokens, "seconds": round(self.seconds, 6),
                                 "ok": self.ok}
        if not self.ok:
            entry["reason"] = self.reason
        if self.answer is not None:
            # What the model proposed, by name and fingerprint: enough to reconstruct the run's
            # decisions from the log, without copying the model's whole text into it.
            entry["tool_calls"] = [c.name for c in self.answer.tool_calls]
            entry["text_sha256"] = hashlib.sha256(self.answer.text.encode("utf-8", "surrogatepass")).hexdigest()
            entry["text_chars"] = len(self.answer.text)
        return entry


def _tokens(attempts: Sequence[Attempt]) -> int:
    return sum(a.tokens for a in attempts)


def _ladder_text(header: str, attempts: Sequence[Attempt]) -> str:
    """``header``, a line per attempt, and the tokens they all cost: how a resolved or exhausted cascade prints."""
    return "\n".join([header, *(a.line() for a in attempts), f"  total tokens across all tiers: {_tokens(attempts)}"])


@dataclass(frozen=True, slots=True)
class CascadeResult:
    """The verified answer, the tier that gave it, and the ladder it took to get there."""

    answer: TierAnswer
    host: str  # the name of the tier whose answer passed
    attempts: tuple[Attempt, ...]
    seq: int | None = None  # the CASCADE_RESOLVED record's ticket in the log, when one was written

    @property
    def escalations(self) -> int:
        return len(self.attempts) - 1

    @property
    def tokens_used(self) -> int:
        """Every tier's tokens, the rejected ones included."""
        return _tokens(self.attempts)

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def tool_calls(self) -> tuple[Any, ...]:
        return self.answer.tool_calls

    def format_text(self) -> str:
        return _ladder_text(f"cascade resolved on {inert(self.host)} after {self.escalations} escalation(s)",
                            self.attempts)


class CascadeExhausted(SagaError):
    """No tier of the ladder produced an answer that passed verification; nothing is returned."""

    def __init__(self, attempts: Sequence[Attempt]) -> None:
        self.attempts = tuple(attempts)
        last = self.attempts[-1] if self.attempts else None
        why = f"; the last ({inert(last.tier)}) was rejected: {inert(last.reason)}" if last is not None else ""
        super().__init__(
            f"cascade exhausted: none of {len(self.attempts)} tier(s) passed verification{why}; "
            "see .attempts or .format_text() for every tier's reason"
        )

    @property
    def tokens_used(self) -> int:
        return _tokens(self.attempts)

    def format_text(self) -> str:
        return _ladder_text(f"cascade exhausted: no tier passed after {len(self.attempts)} attempt(s)", self.attempts)


def _check_ladder(ladder: Any) -> list[Tier]:
    if isinstance(ladder, (str, bytes)) or not isinstance(ladder, Sequence) or not ladder:
        raise ConfigurationError(f"cascade needs ladder=[tier, ...] (cheapest first, at least one), got {ladder!r:.80}")
    for tier in ladder:
        name = getattr(tier, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"every tier needs a non-empty str .name; {tier!r:.80} has {name!r}")
        if not iscoroutinefunction(getattr(tier, "complete", None)):
            raise ConfigurationError(
                f"tier {name!r} needs `async def complete(request, feedback=None) -> TierAnswer`"
            )
    return list(ladder)


async def cascade(
    request: Any,
    *,
    ladder: Sequence[Tier],
    verify: Verifier,
    wal: WAL | str | os.PathLike[str] | None = None,
    saga_id: str | None = None,
) -> CascadeResult:
    """The first answer, cheapest tier first, that ``verify`` accepts.

    The trace is written as one record to ``wal`` if given, else to the current saga's
    log (inside ``saga_scope``); outside both, nothing is written. ``saga_id`` names the
    saga the record belongs to when ``wal`` is given outside a saga.
    """
    tiers = _check_ladder(ladder)
    if not callable(verify):
        raise ConfigurationError(f"cascade needs verify=<a verifier: answer -> Verdict>, got {verify!r:.80}")
    log = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
    attempts: list[Attempt] = []
    feedback: str | None = None
    for tier in tiers:
        started = time.perf_counter()
        try:
            answer = await tier.complete(request, feedback)
        except ConfigurationError:
            raise  # a mistake in how the ladder was set up, not an answer to escalate past
        except Exception as err:  # noqa: BLE001 - a tier that fails is escalated past, with its reason
            reason = scrub_text(f"the tier failed: {type(err).__name__}: {err}")
            attempts.append(Attempt(tier.name, 0, time.perf_counter() - started, False, reason))
            # An outage says nothing a model could correct: the next tier is told the last
            # verifier's reason, if there was one, and never this error.
            continue
        seconds = time.perf_counter() - started
        if not isinstance(answer, TierAnswer):
            raise ConfigurationError(
                f"tier {tier.name!r} returned {type(answer).__name__}; complete() must return a TierAnswer"
            )
        verdict = await judge(verify, answer)
        attempts.append(Attempt(tier.name, answer.tokens, seconds, verdict.ok, scrub_text(verdict.reason), answer))
        if verdict.ok:
            seq = await _record(RecordType.CASCADE_RESOLVED,
                                f"cascade resolved on {tier.name} after {len(attempts) - 1} escalation(s)",
                                attempts, log, saga_id, host=tier.name)
            if answer.tool_calls:
                # The agent will make these calls next: a Speculator attached to the saga runs
                # the REVERSIBLE ones ahead (parallel calls of one response); without one, nothing.
                planned_calls(answer.tool_calls)
            return CascadeResult(answer, tier.name, tuple(attempts), seq)
        feedback = verdict.reason
    exhausted = CascadeExhausted(attempts)
    last = attempts[-1]
    await _record(RecordType.CASCADE_EXHAUSTED,
                  f"cascade exhausted: no tier passed after {len(attempts)} attempt(s); "
                  f"the last ({last.tier}) was rejected: {last.reason}", attempts, log, saga_id)
    raise exhausted


async def _record(rtype: RecordType, verdict: str, attempts: Sequence[Attempt], wal: WAL | None,
                  saga_id: str | None, host: str | None = None) -> int | None:
    saga = current_saga()
    if wal is None:
        if saga is None:
            return None
        wal = saga.wal
    sid = saga_id or (saga.saga_id if saga is not None else new_saga_id())
    body: dict[str, Any] = {
        "verdict": verdict,  # one line, what `graph` and `agent-saga ui` show for this record
        "host": host,
        "escalations": len(attempts) - 1,
        "tokens_used": _tokens(attempts),
        "ladder": [a.as_record() for a in attempts],
    }
    ticket = wal.append(rtype.value, sid, encodable(body), None)
    await wal.barrier_async(ticket)
    return ticket
