"""A person settles a step nobody could tell about: it landed (with this result), or it did not.

A resumed run whose step was in flight at the crash, and that no ``@reconciler`` could settle,
is escalated (``resume-unknown``) and left open: resume never guesses. The person checks the
provider and says what they found; :func:`settle` writes it as ``STEP_SETTLED``, signed by an
operator key the host trusts (as a repair's records are: the agent writes the log, so a name in
it is only a claim), under the saga's claim (no daemon acts on the saga meanwhile), and answers
the escalation. The fold believes only a signed ``STEP_SETTLED`` (``recovery.fold``): then the
step reads as the reconciler's answer would have made it, committed with the result given (and
its undo built from that result by the step's recipe, as for a reconciler), or not applied and
run again live on resume, and the next sweep (or ``agent_saga.resume``) resumes the run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agent_saga.durable_run import LogTarget, log_of
from agent_saga.errors import ResumeRefused
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.records import RecordType as R
from agent_saga.log.results import DURABLE_RESULT_BYTES, logged_result
from agent_saga.log.rewrite import operator_signer
from agent_saga.recovery.escalations import Escalation
from agent_saga.recovery.in_doubt import undo_from
from agent_saga.recovery.stores import recovery_store, verified_tail

__all__ = ["SETTLES", "settle"]

#: The escalations a person settles this way: a step in doubt that held a resume.
SETTLES = "resume-unknown"


def settle(
    escalation_id: str, *, landed: bool, result: Any = None, operator: str, reason: str,
    signer: str | os.PathLike[str] | OperatorKey | None, wal: LogTarget = None,
) -> Escalation:
    """Record what a person found about the step of ``resume-unknown`` escalation ``escalation_id``.

    ``landed``: the effect happened, and ``result`` (JSON) is what the tool would have returned;
    else it did not happen (``result`` must then be None). ``signer`` is the operator's key (one
    the host trusts). Raises FileNotFoundError when there is no log, ConfigurationError when the key
    is not one the host trusts, and ``ResumeRefused`` (one line; nothing written) when the escalation is
    not a pending ``resume-unknown``, its step is settled in the log already, or another process
    holds the saga's claim. Returns the answered escalation.
    """
    for name, value in (("operator", operator), ("reason", reason)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name}= must say {'who' if name == 'operator' else 'why'} (a non-empty string), got {value!r}")
    if not landed and result is not None:
        raise ValueError("result= goes with landed=True: a step that did not land returned nothing")
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"result= must be JSON (what the tool returned, as the log records it): {err}") from None
    store = recovery_store(log_of(None) if wal is None else wal)
    try:
        if not store.exists():
            raise FileNotFoundError(f"no log at {store.location}")  # never one made at a mistyped path
        key = operator_signer(signer, "a settle")
        log = log_of(wal)
        queue = store.escalations()
        found = next((e for e in queue.pending() if e.id == escalation_id), None)
        if found is None or found.kind != SETTLES or found.step is None:
            raise ResumeRefused(
                f"no pending {SETTLES} escalation {escalation_id!r} in {store.location}: "
                "'agent-saga escalations' lists them"
            )
        claim = store.try_claim(found.saga)
        if claim is None:
            raise ResumeRefused(f"saga {found.saga} is being resumed or recovered right now; settle it after")
        try:
            log.barrier()  # what this process queued is on disk before the log is read
            view = verified_tail(store, None, "a settle", ResumeRefused).sagas.get(found.saga)
            step = view.steps.get(found.step) if view is not None else None
            if step is None or not step.applied or step.committed:
                how = "never recorded" if step is None else step.state
                raise ResumeRefused(f"step {found.step} of saga {found.saga} is settled in the log already ({how})")
            body: dict[str, Any] = {"op": step.op, "operator": operator, "reason": reason, "landed": landed,
                                    "escalation": found.id}
            if landed:
                step.facts = f"{operator} says it landed"
                body["compensation"], problem = undo_from(found.saga, step, result)
                if problem:
                    body["problem"] = problem
                body["result"] = logged_result(result, "value", (), DURABLE_RESULT_BYTES)[1]
            log.append(R.STEP_SETTLED.value, found.saga, key.sign_saga(R.STEP_SETTLED.value, found.saga, body),
                       found.step)
            answered = queue.resolve(found.id, f"settled by {operator}: {'landed' if landed else 'did not land'}; "
                                               f"{reason}")
            log.append(R.ESCALATION_RESOLVED.value, found.saga, {
                "escalation": found.id, "kind": found.kind, "by": operator,
            }, found.step)
            log.barrier()
        finally:
            claim.release()
    finally:
        store.close()
    return answered
