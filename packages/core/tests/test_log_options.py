"""The three durable logs share one options type (issue 42 §4): LogOptions, or its fields as keywords."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest

from agent_saga.log import FileWAL, LogOptions, PostgresWAL, RedisWAL, open_log


def test_options_and_keywords_make_the_same_log_and_a_keyword_wins_over_options(tmp_path: Path) -> None:
    given = FileWAL(tmp_path / "a.wal", options=LogOptions(chain=False, linger=0.0, max_pending=7))
    spelled = FileWAL(tmp_path / "b.wal", chain=False, linger=0.0, max_pending=7)
    both = FileWAL(tmp_path / "c.wal", options=LogOptions(linger=1.0, backpressure="block"), linger=0.0)
    try:
        for wal in (given, spelled):
            assert (wal.chain, wal.linger, wal.max_pending, wal.backpressure) == (False, 0.0, 7, "refuse")
        assert (both.chain, both.linger, both.backpressure) == (True, 0.0, "block")
    finally:
        for wal in (given, spelled, both):
            wal.close()


def test_an_unknown_option_is_named_with_the_ones_a_log_takes(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"unknown log option\(s\) lingr: a log takes chain, linger, barrier_timeout"):
        open_log(str(tmp_path / "a.wal"), lingr=0.0)
    assert not (tmp_path / "a.wal").exists()


@pytest.mark.parametrize(("name", "value", "why"), [
    ("backpressure", "drop", "backpressure must be 'refuse' or 'block'"),
    ("max_pending", 0, "max_pending must be at least 1"),
    ("barrier_timeout", 0, "barrier_timeout must be a positive number of seconds"),
])
def test_the_options_are_checked_once_for_every_backend(name: str, value: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        LogOptions(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", [FileWAL, PostgresWAL, RedisWAL])
def test_every_durable_log_takes_the_options_and_spells_none_of_them_itself(backend: type) -> None:
    params = inspect.signature(backend).parameters
    assert params["options"].default is None
    assert params["keywords"].kind is inspect.Parameter.VAR_KEYWORD
    assert not {f.name for f in fields(LogOptions)} & set(params)


def test_the_keywords_type_names_every_option() -> None:
    from agent_saga.log.group import LogKeywords

    assert list(LogKeywords.__annotations__) == [f.name for f in fields(LogOptions)]
