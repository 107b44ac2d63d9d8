"""A durable step's records, joined from their parts' encodings, are the records the log would encode.

On a log whose append is the group commit's own, the engine gives a durable step's STEP_INTENT
and STEP_COMMITTED to the log as text joined from their parts (engine/durable_record.py): that
text must be byte for byte what encoding the body gives, a part the log cannot hold must still
be refused to its caller (never break the log for other sagas), and a log that wraps ``append``
must still see every record.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from test_commit_record import _Counting, _SpoilingGate  # a wrapped append; a gate that spoils the args

from agent_saga import FileWAL, SagaAborted, StepOptions, WALRefused, saga_scope
from agent_saga.audit import verify_log
from agent_saga.credentials import CredentialError
from agent_saga.engine.commit_record import UNRECORDED
from agent_saga.engine.durable_record import durable_commit_json, intent_json
from agent_saga.engine.undo import describe
from agent_saga.errors import CompensationError
from agent_saga.log.codec import encode_entry
from agent_saga.registry import compensator, delete_by, unregister
from agent_saga.semantics import ActionSemantics, Compensation

# Any code point, lone surrogates included (st.text leaves them out unless asked): quotes, controls, é.
_text = st.text(st.characters(exclude_categories=()), max_size=8)
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | _text
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                       max_leaves=6)


def _undo_fn(**kwargs: Any) -> None:
    """The undo every generated Compensation runs; registered once under _REGISTERED."""


_REGISTERED = "durable_record.undo"
compensator(_REGISTERED)(_undo_fn)


@st.composite
def _undos(draw: st.DrawFn) -> Compensation | None:
    """Any undo a step may carry: none, or one with a registered handler (recoverable), an unknown
    handler or none (not), any kwargs, description and key (a NaN, a lone surrogate included)."""
    if draw(st.booleans()):
        return None
    handler = draw(st.sampled_from([_REGISTERED, None]) | _text.filter(bool))
    try:
        return Compensation(fn=_undo_fn, handler=handler, kwargs=draw(st.dictionaries(_text, _values, max_size=3)),
                            description=draw(_text), idempotency_key=draw(st.none() | _text))
    except (CompensationError, CredentialError):  # kwargs its checks refuse (a secret-looking name): no such undo
        return draw(st.nothing())


_durable = st.sampled_from([ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE])


def _expected(rtype: str, body: dict[str, Any]) -> str | None:
    try:
        return encode_entry(rtype, "saga", 1, body)
    except WALRefused:
        return None


@settings(max_examples=examples(300))
@given(tool=_text.filter(bool), semantics=_durable, op=_text, args=st.dictionaries(_text, _values, max_size=3),
       prebuilt=_undos(), fallback=st.booleans(), recipe=st.none() | _values, origin=st.none() | _text,
       claims=st.none() | st.dictionaries(_text, _values, max_size=2))
def test_the_joined_intent_is_the_bodys_encoding_or_none_where_the_log_refuses_the_body(
    tool: str, semantics: ActionSemantics, op: str, args: dict[str, Any], prebuilt: Compensation | None,
    fallback: bool, recipe: Any, origin: str | None, claims: dict[str, Any] | None,
) -> None:
    body: dict[str, Any] = {
        "tool": tool, "semantics": semantics, "op": op, "args": args, "compensation": describe(prebuilt),
        "fallback": fallback,
    }
    if recipe is not None:
        body["recipe"] = recipe
    if origin is not None:
        body["origin"] = origin
    if claims:
        body["provenance"] = claims
    joined = intent_json(tool, semantics, op, args, prebuilt, fallback, recipe, origin, claims)
    assert joined == _expected("STEP_INTENT", body)


@settings(max_examples=examples(300))
@given(op=_text, comp=_undos(), problem=st.none() | _text, reconciled=st.booleans(),
       result=st.just(UNRECORDED) | _values)
def test_the_joined_commit_is_the_bodys_encoding_or_none_where_the_log_refuses_the_body(
    op: str, comp: Compensation | None, problem: str | None, reconciled: bool, result: Any,
) -> None:
    body: dict[str, Any] = {"op": op, "compensation": describe(comp)}
    if reconciled:
        body["reconciled"] = True
    if problem is not None:
        body["problem"] = problem
    if result is not UNRECORDED:
        body["result"] = result
    assert durable_commit_json(op, comp, problem, reconciled, result) == _expected("STEP_COMMITTED", body)


@pytest.fixture
def refund() -> Iterator[Any]:
    """The registered undo; ``refund.done`` lists the charges it refunded."""
    done: list[str] = []

    @compensator("joined.refund")
    def refund(charge: str) -> None:
        done.append(charge)

    refund.done = done  # type: ignore[attr-defined]
    yield refund
    unregister("joined.refund")


def _charge() -> dict[str, Any]:
    return {"id": "ch_é", "amount": 1.5}


def _steps(wal: FileWAL, refund: Any) -> None:
    """Durable steps of each shape the records take: origin, recipe, an undo known before, a problem."""
    with pytest.raises(SagaAborted), saga_scope(wal, saga_id="joined-run") as s:  # one id: the same keys
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge, args={"sku": "é-1", "n": [1.5, None]},
                  compensate=lambda r: Compensation(handler="joined.refund", kwargs={"charge": r["id"]}))
        s.execute(tool="stripe.charge", options=StepOptions("COMPENSABLE", origin="agent:é", record_result="none"),
                  forward=_charge, compensate=delete_by(refund, field="id"))
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: "sent")
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge,
                  compensate=Compensation(handler="joined.refund", kwargs={"charge": "known"}))
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge,
                  compensate=lambda r: Compensation(handler="joined.refund", kwargs={"charge": r["missing"]}))


def _bodies(path: Path) -> list[tuple[str, dict[str, Any]]]:
    wal = FileWAL(path)
    try:
        return [(r["type"], r["body"]) for r in wal.records() if r["type"] in ("STEP_INTENT", "STEP_COMMITTED")]
    finally:
        wal.close()


def test_joined_records_read_back_as_the_records_a_wrapped_append_encodes(
    tmp_path: Path, refund: Any, encoded_whole: list[str],
) -> None:
    joined = FileWAL(tmp_path / "joined.wal")
    try:
        _steps(joined, refund)
    finally:
        joined.close()
    # The cost this path exists to save: on the group commit's own append, no durable step's
    # record is encoded whole (the saga's start and end, and the rollback's records, still are).
    assert "STEP_INTENT" not in encoded_whole and "STEP_COMMITTED" not in encoded_whole and "SAGA_STARTED" in encoded_whole
    wrapped = _Counting(tmp_path / "wrapped.wal")
    try:
        _steps(wrapped, refund)
    finally:
        wrapped.close()
    assert wrapped.seen.count("STEP_INTENT") == 5 and wrapped.seen.count("STEP_COMMITTED") == 5
    got = _bodies(tmp_path / "joined.wal")
    assert got == _bodies(tmp_path / "wrapped.wal")
    intents = [body for rtype, body in got if rtype == "STEP_INTENT"]
    commits = [body for rtype, body in got if rtype == "STEP_COMMITTED"]
    assert intents[0]["args"] == {"sku": "é-1", "n": [1.5, None]}
    assert intents[1]["origin"] == "agent:é" and intents[1]["recipe"]["handler"] == "joined.refund"
    assert intents[3]["compensation"]["kwargs"] == {"charge": "known"}  # the undo known before the call
    assert commits[0]["compensation"]["kwargs"] == {"charge": "ch_é"} and commits[0]["result"]["id"] == "ch_é"
    assert "result" not in commits[1] and commits[2]["compensation"] is None and commits[2]["result"] == "sent"
    assert "missing" in commits[4]["problem"] and commits[4]["compensation"] is None
    # Each rollback ran the undos the records describe, newest first (the known one too).
    assert refund.done == ["known", "ch_é", "ch_é"] * 2
    assert verify_log(tmp_path / "joined.wal").ok


def test_an_intent_spoiled_after_the_door_is_refused_to_its_caller_before_the_call(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "spoiled.wal")
    called: list[int] = []
    try:
        with pytest.raises(SagaAborted) as aborted, saga_scope(wal, gate=_SpoilingGate()) as s:
            s.execute(tool="note", semantics="IRREVERSIBLE", forward=lambda: called.append(1), args={"memo": "fine"})
        assert isinstance(aborted.value.cause, WALRefused)
        assert "lone surrogate" in str(aborted.value.cause)
        assert called == []  # no intent, no call
        with saga_scope(wal) as s:
            assert s.execute(tool="note", semantics="IRREVERSIBLE", forward=lambda: 2) == 2
        wal.barrier()
        assert wal.broken is None
    finally:
        wal.close()
    assert [body.get("result") for rtype, body in _bodies(tmp_path / "spoiled.wal") if rtype == "STEP_COMMITTED"] == [2]
    assert verify_log(tmp_path / "spoiled.wal").ok
