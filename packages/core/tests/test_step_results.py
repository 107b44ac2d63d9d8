"""What a step returned, as its STEP_COMMITTED record holds it (issue 28: the log records results).

Every log here is written by real sagas on a FileWAL and read back from the file.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import Compensation, ConfigurationError, FileWAL, StepOptions, saga_scope
from agent_saga.audit import verify_log
from agent_saga.log import read_records, redact_where
from agent_saga.log.results import MAX_RESULT_BYTES, SHAPE_KEY, logged_result, shape_of
from agent_saga.redaction import REDACTED


def _run(path: Path, result: Any, **options: Any) -> dict[str, Any]:
    """One step returning ``result`` in a saga on a FileWAL; its STEP_COMMITTED body, read from the file."""
    wal = FileWAL(path)
    try:
        with saga_scope(wal) as s:
            got = s.execute(tool="t", forward=lambda: result, semantics="IRREVERSIBLE", **options)
            assert got is result  # what the caller gets is never the logged form
    finally:
        wal.close()
    committed = [r for r in read_records(path) if r["type"] == "STEP_COMMITTED"]
    assert len(committed) == 1
    body: dict[str, Any] = committed[0]["body"]
    return body


def test_a_small_plain_result_is_recorded_as_the_value(tmp_path: Path) -> None:
    value = {"id": "ch_1", "amount": 12.5, "items": [1, 2, {"sku": "a"}], "ok": True, "none": None}
    body = _run(tmp_path / "a.wal", value)
    assert body["result"] == value
    assert verify_log(tmp_path / "a.wal").ok


@pytest.mark.parametrize("value", [None, 0, "ok", [1, 2]])
def test_scalar_none_and_list_results_are_values_too(tmp_path: Path, value: Any) -> None:
    body = _run(tmp_path / "a.wal", value)
    assert "result" in body and body["result"] == value


def test_a_result_over_the_bound_is_recorded_as_its_shape_only(tmp_path: Path) -> None:
    big = {"page": "x" * MAX_RESULT_BYTES, "n": 3}
    body = _run(tmp_path / "a.wal", big)
    assert body["result"] == {SHAPE_KEY: {"type": "dict", "length": 2, "keys": {"n": "int", "page": "str"}}}
    assert "xxxx" not in (tmp_path / "a.wal").read_text()
    # Just under the bound is a value; the bound counts UTF-8 bytes of the canonical JSON.
    fits = "y" * (MAX_RESULT_BYTES - 2)
    assert _run(tmp_path / "b.wal", fits)["result"] == fits
    multibyte = "é" * (MAX_RESULT_BYTES // 2)  # as many characters as fit, twice the bytes
    assert _run(tmp_path / "c.wal", multibyte)["result"] == {SHAPE_KEY: {"type": "str", "length": MAX_RESULT_BYTES // 2}}


def test_a_secret_looking_key_in_a_result_is_masked_like_an_argument(tmp_path: Path) -> None:
    value = {"user": "bob", "api_key": "sk-live-abcdef123456", "nested": [{"password": "hunter22"}],
             "dsn": "postgres://app:s3cretpw@db/x"}
    body = _run(tmp_path / "a.wal", value)
    assert body["result"] == {"user": "bob", "api_key": REDACTED, "nested": [{"password": REDACTED}],
                              "dsn": f"postgres://app:{REDACTED}@db/x"}
    text = (tmp_path / "a.wal").read_text()
    assert "sk-live-abcdef123456" not in text and "hunter22" not in text and "s3cretpw" not in text
    # reveal= names what is logged in clear, for results as for arguments.
    shown = _run(tmp_path / "b.wal", value, reveal={"api_key"})
    assert shown["result"]["api_key"] == "sk-live-abcdef123456"


class Client:
    def __repr__(self) -> str:
        return "Client(token='do-not-log-me')"


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        (math.nan, {"type": "float"}),
        ({"when": datetime.date(2026, 1, 2)}, {"type": "dict", "length": 1, "keys": {"when": "date"}}),
        ({1: "a", "b": 2}, {"type": "dict", "length": 2, "keys": {"1": "str", "b": "int"}}),
        (Client(), {"type": "Client"}),
        ("\udc80 lone surrogate", {"type": "str", "length": 16}),
        ({SHAPE_KEY: {"type": "int"}}, {"type": "dict", "length": 1, "keys": {SHAPE_KEY: "dict"}}),
    ],
)
def test_an_unencodable_result_is_recorded_as_its_shape_and_the_step_commits(
    tmp_path: Path, value: Any, shape: dict[str, Any]
) -> None:
    body = _run(tmp_path / "a.wal", value)
    assert body["result"] == {SHAPE_KEY: shape}
    assert "do-not-log-me" not in (tmp_path / "a.wal").read_text()
    assert verify_log(tmp_path / "a.wal").ok


def test_a_circular_result_is_recorded_as_its_shape(tmp_path: Path) -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert _run(tmp_path / "a.wal", loop)["result"] == {SHAPE_KEY: {"type": "list", "length": 2}}


def test_record_result_shape_and_none(tmp_path: Path) -> None:
    value = {"id": "ch_9", "status": "paid"}
    shaped = _run(tmp_path / "a.wal", value, record_result="shape")
    assert shaped["result"] == {SHAPE_KEY: {"type": "dict", "length": 2, "keys": {"id": "str", "status": "str"}}}
    assert "ch_9" not in (tmp_path / "a.wal").read_text()
    nothing = _run(tmp_path / "b.wal", value, record_result="none")
    assert "result" not in nothing
    assert "ch_9" not in (tmp_path / "b.wal").read_text()
    opts = StepOptions("IRREVERSIBLE", record_result="none")
    assert "result" not in _run(tmp_path / "c.wal", value, options=opts)


def test_record_result_is_validated_by_name() -> None:
    with pytest.raises(ConfigurationError, match=r"record_result= must be one of 'value', 'shape', 'none'"):
        StepOptions("IRREVERSIBLE", record_result="all")  # type: ignore[arg-type]


def test_a_reversible_and_a_compensable_step_record_their_results(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    wal = FileWAL(path)
    with saga_scope(wal) as s:
        s.execute(tool="r", forward=lambda: "read", semantics="REVERSIBLE")
        s.execute(tool="c", forward=lambda: {"id": 7}, semantics="COMPENSABLE",
                       compensate=lambda r: Compensation(fn=lambda: None, description=f"undo {r['id']}"))
    wal.close()
    results = [r["body"]["result"] for r in read_records(path) if r["type"] == "STEP_COMMITTED"]
    assert results == ["read", {"id": 7}]


def test_redact_where_erases_a_recorded_result_and_the_log_still_verifies(tmp_path: Path, operator_key: Path) -> None:
    path = tmp_path / "a.wal"
    _run(path, {"email": "ann@example.com", "id": 4})
    assert "ann@example.com" in path.read_text()
    erased = redact_where(path, lambda r: "ann@example.com" in json.dumps(r.get("body", {}).get("result")),
                          by="dpo", reason="erasure", signer=operator_key)
    assert len(erased.seqs) == 1
    assert "ann@example.com" not in path.read_text()
    assert verify_log(path).ok


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=60,
)
_anything = st.recursive(
    _json | st.builds(object) | st.binary(max_size=8) | st.dates() | st.integers(min_value=10**5000, max_value=10**5001),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow])
@given(value=_anything, mode=st.sampled_from(["value", "shape"]))
def test_any_result_is_recorded_as_a_bounded_loggable_value_or_a_shape(value: Any, mode: Any) -> None:
    recorded, entry = logged_result(value, mode)
    assert recorded
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")  # strict JSON, valid UTF-8: the log's canonical form can hold it
    if isinstance(entry, dict) and SHAPE_KEY in entry:
        assert entry == {SHAPE_KEY: shape_of(value)}
    else:
        assert mode == "value"
        assert len(text.encode()) <= MAX_RESULT_BYTES


@settings(max_examples=examples(100))
@given(leaves=st.lists(st.text(min_size=1, max_size=20).map(lambda t: "V~" + t), min_size=1, max_size=6))
def test_a_shape_never_holds_a_value(leaves: list[str]) -> None:
    value = {"a": leaves, "b": {"c": leaves[0]}, "d": leaves[-1]}
    _, entry = logged_result(value, "shape")
    assert "V~" not in json.dumps(entry, ensure_ascii=False)
    assert logged_result(value, "none") == (False, None)


def test_no_picture_or_ui_view_shows_a_recorded_result(tmp_path: Path) -> None:
    """Results are agent-written data: the pictures and the UI do not show them at all (so none
    of them can print one un-inerted); only replay serves them, and the corpus gives their shape."""
    from cli_support import run_cli

    from agent_saga.ui import reconstruct, render_animation, render_outcomes, to_dot, to_mermaid
    from agent_saga.ui._runs import _step_detail

    path = tmp_path / "a.wal"
    marker = "RESULT-MARKER\x1b[31m"
    wal = FileWAL(path)
    with saga_scope(wal, name="pics") as s:
        s.execute(tool="t.read", semantics="REVERSIBLE", forward=lambda: {"text": marker})
        s.execute(tool="t.write", semantics="COMPENSABLE", forward=lambda: [marker],
                  compensate=lambda r: Compensation(fn=lambda: None, description="undo"))
    wal.close()
    records = list(read_records(path))
    assert "RESULT-MARKER" in json.dumps([r["body"].get("result") for r in records if r["type"] == "STEP_COMMITTED"])
    sagas = reconstruct(records)
    shown = [to_mermaid(sagas), to_dot(sagas), render_animation(sagas[0]), render_outcomes(sagas),
             json.dumps(_step_detail(records), default=str), run_cli("graph", "--wal", str(path)).stdout,
             run_cli("graph", "--wal", str(path), "--format", "dot").stdout]
    for text in shown:
        assert "RESULT-MARKER" not in text


_scalar = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300)
           | st.sampled_from(["https://u:pw@h/x", "\x00\"\\", "é"]))


@settings(max_examples=examples(200))
@given(value=st.dictionaries(st.sampled_from(["id", "api_key", "status", "n", "é", "password"]) | st.text(max_size=30),
                             _scalar, max_size=12))
def test_a_flat_result_is_recorded_as_the_redacted_value_exactly_when_it_fits(value: dict[str, Any]) -> None:
    from agent_saga.log.codec import canonical
    from agent_saga.redaction import redact_args

    redacted = redact_args(value)
    try:
        text = json.dumps(redacted, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        fits = len(text.encode()) <= MAX_RESULT_BYTES and SHAPE_KEY not in value
    except (ValueError, UnicodeEncodeError):
        fits = False
    recorded, entry = logged_result(value, "value")
    assert recorded
    if fits:
        assert entry == redacted and canonical(entry) == text
    else:
        assert entry == {SHAPE_KEY: shape_of(value)}


@settings(max_examples=examples(300))
@given(value=_scalar | st.integers(min_value=10**17, max_value=10**19) | st.text(min_size=300, max_size=400),
       limit=st.sampled_from([8, 30, 400, MAX_RESULT_BYTES]))
def test_a_scalar_result_is_recorded_as_the_general_path_records_it(value: Any, limit: int) -> None:
    # Issue 43: a scalar result is decided in a few tests, without the walk and the encoding;
    # what it records must be what the general path records, whatever the scalar and the bound.
    from agent_saga.log import results

    quick = logged_result(value, "value", (), limit)
    general = results._small_scalar
    results._small_scalar = lambda *_: False  # type: ignore[assignment]
    try:
        walked = logged_result(value, "value", (), limit)
    finally:
        results._small_scalar = general
    assert quick == walked
