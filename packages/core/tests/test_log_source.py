"""One reading of a whole log for the tools that take one (corpus, replay, failure model, profile)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_saga import FailureModel, build_corpus, counterfactual_replay, saga_scope
from agent_saga.log import FileWAL, read_records
from agent_saga.log.source import log_records
from agent_saga.synthetic import WALProfile


def _log(path: Path) -> Path:
    with saga_scope(FileWAL(path), name="one") as saga:
        saga.execute(tool="t.one", forward=lambda: 1, semantics="REVERSIBLE")
    return path


def test_every_form_of_a_log_reads_as_the_same_records(tmp_path: Path) -> None:
    path = _log(tmp_path / "a.wal")
    expected = list(read_records(path))
    lines = [*path.read_text(encoding="utf-8").splitlines(), ""]  # a blank last line is no record
    wal = FileWAL(path)
    try:
        forms = [path, str(path), wal, expected, iter(expected), lines, [json.loads(x) for x in lines if x]]
        assert all(log_records(form, caller="t") == expected for form in forms)
    finally:
        wal.close()


@pytest.mark.parametrize(("source", "message"), [
    (42, "t: int is not a log"),
    (b"{}", "t: bytes is not a log"),
    ({"type": "SAGA_STARTED", "saga": "s"}, "t: dict is not a log"),
    (["not json"], "t: record 1 is not JSON"),
    ([{"type": "SAGA_STARTED", "saga": "s"}, 7], "t: record 2 is a int, not a log record"),
    ([{"saga": "s"}], "t: record 1 is a dict, not a log record"),
])
def test_anything_else_is_refused_naming_the_record_never_skipped(source: object, message: str) -> None:
    with pytest.raises(TypeError, match=f"^{message}: pass a log file's path"):
        log_records(source, caller="t")


def test_the_four_tools_read_a_log_the_one_way(tmp_path: Path) -> None:
    # Each used to have its own reading: one refused a path, one skipped what was not a record.
    path = _log(tmp_path / "a.wal")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert build_corpus(lines) == build_corpus(path)
    assert str(FailureModel.fit(path, min_support=1)) == str(FailureModel.fit(read_records(path), min_support=1))
    assert WALProfile.fit(lines).to_json() == WALProfile.fit(path).to_json()
    assert counterfactual_replay(path, lambda: None).verdict == counterfactual_replay(lines, lambda: None).verdict
    for tool in (build_corpus, FailureModel.fit, WALProfile.fit):
        with pytest.raises(TypeError, match="record 2 is a int, not a log record"):
            tool([next(iter(read_records(path))), 7])  # type: ignore[operator]
