"""The runtime's verdict records as one labelled line each, for every picture of a run.

A verdict record (ANSWER_GROUNDED, ...) is about a saga, not about one of its steps,
so the fold does not draw it; ``graph`` and the flight recorder show each one as a
line under the saga, after the step it followed. The label is built from the
record's body, which the agent's text reached: the renderers pass it through
``inert`` like every other label.

To show a new verdict record type, add one entry to ``LABELLERS``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_saga.log.records import RecordType as R
from agent_saga.recovery.fold import repair_operator

__all__ = ["LABELLERS", "GraphVerdict", "verdict_line"]

Kind = Literal["ok", "bad"]


@dataclass(frozen=True, slots=True)
class GraphVerdict:
    """One verdict record of a saga: its seq, type, label, whether it passed, the step it followed (0: none)."""

    seq: int
    type: str
    label: str
    kind: Kind
    after_step: int = 0


def _answer_grounded(body: Mapping[str, Any]) -> tuple[str, Kind]:
    claims = body.get("claims")
    claims = claims if isinstance(claims, list) else []
    statuses: dict[str, int] = {}
    for claim in claims:
        status = str(claim.get("status")) if isinstance(claim, dict) else "?"
        statuses[status] = statuses.get(status, 0) + 1
    verified = statuses.pop("VERIFIED", 0)
    grounded = body.get("fully_grounded") is True and not statuses and verified > 0
    others = "".join(f", {n} {s}" for s, n in sorted(statuses.items()))
    label = (f"answer: {verified} of {len(claims)} claim(s) VERIFIED{others} - "
             f"{'fully grounded' if grounded else 'NOT fully grounded'}")
    return label, "ok" if grounded else "bad"


def _cascade_resolved(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return str(body.get("verdict") or "cascade resolved"), "ok"


def _cascade_exhausted(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return str(body.get("verdict") or "cascade exhausted"), "bad"


def _steps(value: Any) -> str:
    steps = [str(s.get("from_step", "?")) if isinstance(s, Mapping) else str(s)
             for s in (value if isinstance(value, list) else [])]
    return ", ".join(steps) or "none"


def _repair_opened(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return (f"REPAIR opened by {body.get('operator', '?')}: {body.get('reason', '')} "
            f"(keeps step(s) {_steps(body.get('retained'))})"), "bad"


def _value(value: Any) -> str:
    """An amended value as typed: a string quoted as it is (the renderers make it inert once), else JSON."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return f"'{value}'"
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _repair_amended(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return f"repair amended {body.get('field', '?')}: {_value(body.get('old'))} -> {_value(body.get('new'))}", "ok"


def _repair_resumed(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return (f"repair resumed as saga {body.get('continued_as', '?')} by {body.get('operator', '?')} "
            f"(its step(s) {_steps(body.get('retained'))} moved there)"), "ok"


def _repair_abandoned(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return f"repair ABANDONED by {body.get('operator', '?')}: {body.get('reason', '')}; recovery unwinds it", "bad"


def _saga_resumed(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return (f"RESUMED by {body.get('by', '?')} after {body.get('recorded_steps', '?')} recorded step(s): "
            "those asked again are served from the log, the rest run live"), "ok"


def _call(call: Any) -> str:
    """A call as SAGA_DIVERGED records it: its tool and logged arguments."""
    return f"{call.get('tool', '?')} {_value(call.get('args'))}" if isinstance(call, Mapping) else "no more steps"


def _saga_diverged(body: Mapping[str, Any]) -> tuple[str, Kind]:
    got = body.get("got")
    asked = f"asked for {_call(got)}" if isinstance(got, Mapping) else "returned"
    return (f"DIVERGED at recorded position {body.get('position', '?')}: the log has {_call(body.get('expected'))}, "
            f"the code {asked}; unwound"), "bad"


def _when(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(value))
    return "no time limit"


def _wait(body: Mapping[str, Any]) -> str:
    """A durable wait as its records name it: the sleep, or the wait for an event, and which one."""
    what = f"wait for {_value(body.get('name'))}" if body.get("wait") == "event" else "sleep"
    return f"{what} #{body.get('n', '?')}"


def _wait_started(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return f"{_wait(body)} until {_when(body.get('until'))}", "ok"


def _wait_ended(body: Mapping[str, Any]) -> tuple[str, Kind]:
    outcome = body.get("outcome")
    how = f"signalled (seq {body.get('signal', '?')})" if outcome == "signalled" else str(outcome or "?")
    return f"{_wait(body)} ended: {how}", "ok"  # a timeout is an answer the run handles, not a fault


def _event_signalled(body: Mapping[str, Any]) -> tuple[str, Kind]:
    return f"signal {_value(body.get('name'))} sent by {body.get('by', '?')}: {_value(body.get('data'))}", "ok"


#: record type -> (body -> (label, kind)); a record type not here is not a verdict.
LABELLERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, Kind]]] = {
    R.ANSWER_GROUNDED.value: _answer_grounded,
    # the cascade's body carries its own one line (runtime.cascade)
    R.CASCADE_RESOLVED.value: _cascade_resolved,
    R.CASCADE_EXHAUSTED.value: _cascade_exhausted,
    # an operator's repair session (recovery.repair), under the repaired saga
    R.REPAIR_OPENED.value: _repair_opened,
    R.REPAIR_AMENDED.value: _repair_amended,
    R.REPAIR_RESUMED.value: _repair_resumed,
    R.REPAIR_ABANDONED.value: _repair_abandoned,
    # a durable run resumed forward after a crash (recovery.resume), and a resume that diverged
    R.SAGA_RESUMED.value: _saga_resumed,
    R.SAGA_DIVERGED.value: _saga_diverged,
    # a durable run's sleeps and waits for events (engine.waits), and the signals sent to it
    R.WAIT_STARTED.value: _wait_started,
    R.WAIT_ENDED.value: _wait_ended,
    R.EVENT_SIGNALLED.value: _event_signalled,
}


def verdict_line(record: Mapping[str, Any], after_step: int = 0) -> GraphVerdict | None:
    """``record`` as a verdict line, or None when its type is not a verdict."""
    labeller = LABELLERS.get(str(record.get("type")))
    if labeller is None:
        return None
    body = record.get("body")
    label: str
    kind: Kind
    if not isinstance(body, Mapping):
        label, kind = f"{record.get('type')}: body encrypted (no key) or redacted", "bad"
    else:
        if str(record.get("type")).startswith("REPAIR_"):
            body = {**body, "operator": repair_operator(record)}  # a name only a claim says so
        label, kind = labeller(body)
    seq = record.get("seq")
    return GraphVerdict(seq if isinstance(seq, int) else 0, str(record.get("type")), label, kind, after_step)
