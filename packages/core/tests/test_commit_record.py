"""The usual REVERSIBLE commit record, joined from its parts' encodings, is the record the log would encode.

On a log whose append is the group commit's own, the engine gives a REVERSIBLE step's commit
record (no undo, no provenance) to the log as text joined from its parts
(engine/commit_record.py): that text must be byte for byte what encoding the body gives, a
part the log cannot hold must still be refused to its caller (never break the log for other
sagas), and a log that wraps ``append`` must still see every record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import FileWAL, SagaAborted, StepOptions, WALRefused, saga_scope
from agent_saga.audit import verify_log
from agent_saga.engine.commit_record import UNRECORDED, commit_json
from agent_saga.engine.ports import SagaInfo, StepRequest
from agent_saga.log.codec import encode_entry
from agent_saga.semantics import ActionSemantics

# Any code point, lone surrogates included (st.text leaves them out unless asked): quotes, controls, é.
_text = st.text(st.characters(exclude_categories=()), max_size=8)
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | _text
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                       max_leaves=6)


@settings(max_examples=examples(300))
@given(tool=_text.filter(bool), args=st.dictionaries(_text, _values, max_size=3), origin=st.none() | _text,
       result=st.just(UNRECORDED) | _values)
def test_the_joined_text_is_the_bodys_encoding_or_none_where_the_log_refuses_the_body(
    tool: str, args: dict[str, Any], origin: str | None, result: Any
) -> None:
    body: dict[str, Any] = {"tool": tool, "semantics": ActionSemantics.REVERSIBLE, "args": args, "compensation": None}
    if origin is not None:
        body["origin"] = origin
    if result is not UNRECORDED:
        body["result"] = result
    try:
        expected: str | None = encode_entry("STEP_COMMITTED", "saga", 1, body)
    except WALRefused:
        expected = None
    assert commit_json(tool, args, origin, result) == expected


def test_each_recorded_scalar_kind_is_written_as_the_encoder_writes_it() -> None:
    # The kinds written without the encoder, at their edges (the oracle is the encoder itself).
    for result in (0, -1, 10**17, True, False, None, "", 'a "quoted" \\ path\n', 1.5, -0.0, 1e300):
        body = {"tool": "t", "semantics": ActionSemantics.REVERSIBLE, "args": {}, "compensation": None,
                "result": result}
        assert commit_json("t", {}, None, result) == encode_entry("STEP_COMMITTED", "s", 1, body), result
    assert commit_json("t", {}, None, math.nan) is None


class _Counting(FileWAL):
    """A FileWAL that wraps append (as tests and tools do): it must be given every record."""

    def __init__(self, path: Path) -> None:
        self.seen: list[str] = []
        super().__init__(path)

    def append(self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None) -> int:
        self.seen.append(str(type))
        return super().append(type, saga, body, step)


def test_the_usual_commit_record_is_never_encoded_whole_on_a_group_commit_log(
    tmp_path: Path, encoded_whole: list[str]
) -> None:
    # The cost this path exists to save (14k instructions of the caller's 123k per step, callgrind):
    # the bytecode budget (test_fast_path_budget.py) cannot see C work, so the path itself is pinned.
    wal = FileWAL(tmp_path / "joined.wal")
    try:
        with saga_scope(wal) as s:
            for n in range(3):
                s.execute(tool="cart.add", semantics="REVERSIBLE", forward=lambda n=n: n, args={"n": n})
    finally:
        wal.close()
    assert "STEP_COMMITTED" not in encoded_whole and encoded_whole  # the saga's start and end still were
    assert [b["result"] for b in _bodies(tmp_path / "joined.wal")] == [0, 1, 2]


def _bodies(path: Path) -> list[dict[str, Any]]:
    wal = FileWAL(path)
    try:
        return [r["body"] for r in wal.records() if r["type"] == "STEP_COMMITTED"]
    finally:
        wal.close()


def _steps(wal: FileWAL) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="cart.add", semantics="REVERSIBLE", forward=lambda: 3, args={"sku": "é-1", "n": [1.5, None]})
        s.execute(tool="cart.add", options=StepOptions("REVERSIBLE", origin="agent:é", record_result="none"),
                  forward=lambda: {"ok": True})
        s.execute(tool="lookup", semantics="REVERSIBLE", forward=lambda: {"rows": ["a", "b"]})


def test_joined_records_read_back_as_the_records_a_wrapped_append_encodes(tmp_path: Path) -> None:
    joined, wrapped = FileWAL(tmp_path / "joined.wal"), _Counting(tmp_path / "wrapped.wal")
    for wal in (joined, wrapped):
        try:
            _steps(wal)
        finally:
            wal.close()
    assert wrapped.seen.count("STEP_COMMITTED") == 3  # the wrapper saw every commit record
    assert _bodies(tmp_path / "joined.wal") == _bodies(tmp_path / "wrapped.wal") == [
        {"tool": "cart.add", "semantics": "REVERSIBLE", "args": {"sku": "é-1", "n": [1.5, None]},
         "compensation": None, "result": 3},
        {"tool": "cart.add", "semantics": "REVERSIBLE", "args": {}, "compensation": None, "origin": "agent:é"},
        {"tool": "lookup", "semantics": "REVERSIBLE", "args": {}, "compensation": None,
         "result": {"rows": ["a", "b"]}},
    ]
    assert verify_log(tmp_path / "joined.wal").ok


class _SpoilingGate:
    """A gate that puts a lone surrogate into the arguments it is shown, after the door checked them."""

    never_waits = True

    def admit(self, saga: SagaInfo) -> None:
        pass

    def check(self, request: StepRequest) -> None:
        request.args["memo"] = "\ud800"  # type: ignore[index]  # the same dict the commit record holds

    async def check_async(self, request: StepRequest) -> None:
        self.check(request)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        pass


def test_a_part_spoiled_after_the_door_is_refused_to_its_caller_and_the_log_serves_the_next_saga(
    tmp_path: Path,
) -> None:
    wal = FileWAL(tmp_path / "spoiled.wal")
    try:
        with pytest.raises(SagaAborted) as aborted, saga_scope(wal, gate=_SpoilingGate()) as s:
            s.execute(tool="note", semantics="REVERSIBLE", forward=lambda: 1, args={"memo": "fine"})
        assert isinstance(aborted.value.cause, WALRefused)
        assert "lone surrogate" in str(aborted.value.cause)
        with saga_scope(wal) as s:
            assert s.execute(tool="note", semantics="REVERSIBLE", forward=lambda: 2) == 2
        wal.barrier()
        assert wal.broken is None
    finally:
        wal.close()
    assert [b["result"] for b in _bodies(tmp_path / "spoiled.wal")] == [2]
    assert verify_log(tmp_path / "spoiled.wal").ok
