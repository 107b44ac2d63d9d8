"""The compiled hot path (agent-saga-speedups) and its pure-Python twin write the same bytes.

``tox -e core`` installs the compiled twin (packages/speedups) and runs the whole suite on it;
``tox -e core-fast`` runs the pure form (AGENT_SAGA_PURE=1). The property tests below load the
pure modules from their source files and compare them, value for value and byte for byte, with
the compiled modules of ``agent_saga_speedups``; they need the compiled twin installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

import agent_saga
from agent_saga.errors import WALRefused
from agent_saga.log import speedups
from agent_saga.log.records import GENESIS

LOG_SOURCE = Path(speedups.__file__).parent
SPEEDUPS = Path(__file__).resolve().parents[2] / "speedups"
COMPILED = importlib.util.find_spec("agent_saga_speedups") is not None
needs_compiled = pytest.mark.skipif(
    not COMPILED, reason="agent-saga-speedups is not installed here (tox -e core installs and runs it)"
)


@contextmanager
def _as(name: str, module: ModuleType) -> Iterator[None]:
    saved = sys.modules.get(name)
    sys.modules[name] = module
    try:
        yield
    finally:
        if saved is None:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


def _load_pure() -> dict[str, ModuleType]:
    """Each twin's pure module, executed from its .py file, importing the other pure twins."""
    loaded: dict[str, ModuleType] = {}
    for name in speedups.TWINS:
        spec = importlib.util.spec_from_file_location(f"_pure_twin_{name}", LOG_SOURCE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        with _as("agent_saga.log.encodable", loaded.get("encodable", sys.modules["agent_saga.log.encodable"])):
            with _as("agent_saga.log.codec", loaded.get("codec", sys.modules["agent_saga.log.codec"])):
                spec.loader.exec_module(module)
        loaded[name] = module
    return loaded


PURE = _load_pure()
NATIVE = {name: importlib.import_module(f"agent_saga_speedups.{name}") for name in speedups.TWINS} if COMPILED else {}

_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["", "é", "日本", "a\"b\\c", "\x00\x1f"])
_scalars = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False) | _text
)
_json = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4), max_leaves=20
)
# What the codec must refuse or mark, the same way in both forms.
_odd = st.sampled_from([float("nan"), float("inf"), -float("inf"), "\udc80", {1: "a"}, {"\ud800": 1}, (1, 2),
                        object()]) | st.integers(4300, 4400).map(lambda digits: -(10**digits))
_anything = st.recursive(
    _scalars | _odd, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=12,
)
_entries = st.lists(
    st.tuples(st.integers(0, 2**53), st.sampled_from(["STEP_STARTED", "STEP_COMMITTED", "SAGA_COMPLETED"]) | _text,
              _text, st.none() | st.integers(0, 10**6), st.dictionaries(_text, _json, max_size=4)),
    min_size=1, max_size=6,
)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except WALRefused as err:
        return "refused", str(err)
    except (ValueError, TypeError, RecursionError) as err:
        return type(err).__name__, str(err)


def _mark_objects(value: Any) -> Any:
    # object() has no equality across calls: compare such parts by their type's name.
    if isinstance(value, dict):
        return {k: _mark_objects(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark_objects(v) for v in value]
    return value if isinstance(value, (str, int, float, type(None))) else f"<{type(value).__name__}>"


@needs_compiled
def test_the_compiled_modules_are_compiled_from_these_very_files() -> None:
    import agent_saga_speedups

    for name, module in NATIVE.items():
        assert not module.__file__.endswith(".py"), f"agent_saga_speedups.{name} is not an extension module"
        assert agent_saga_speedups.BUILT_FROM[name] == speedups._sha256(LOG_SOURCE / f"{name}.py")


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(entries=_entries, prev=st.sampled_from([GENESIS, "ab" * 32]), first=st.integers(1, 2**40))
def test_sealed_lines_are_the_same_bytes_in_both_forms(entries: list[Any], prev: str, first: int) -> None:
    rows = [(first + i, *entry) for i, entry in enumerate(entries)]
    salts = os.urandom(16 * len(rows))
    with pytest.MonkeyPatch.context() as mp:  # one salt source for both: the bytes must then be equal
        mp.setattr(os, "urandom", lambda n: salts[:n])
        pure = PURE["codec"].seal(rows, prev)
        native = NATIVE["codec"].seal(rows, prev)
    assert native == pure
    for line in pure[0].splitlines():
        record = json.loads(line)
        assert NATIVE["codec"].chain_hash(record) == PURE["codec"].chain_hash(record) == record["hash"]
        assert NATIVE["chain"].check_record(record) == PURE["chain"].check_record(record) == ""
    records = [json.loads(line) for line in pure[0].splitlines()]
    assert NATIVE["chain"].verify_records(records).to_dict() == PURE["chain"].verify_records(records).to_dict()


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(value=_anything, rtype=_text, saga=_text, step=st.none() | st.integers() | _text)
def test_canonical_form_refusals_and_checks_agree(value: Any, rtype: str, saga: str, step: Any) -> None:
    body = {"v": value}
    assert _mark_objects(_outcome(NATIVE["codec"].canonical, value)) == _mark_objects(
        _outcome(PURE["codec"].canonical, value)
    )
    assert _outcome(NATIVE["codec"].encode_entry, rtype, saga, step, body) == _outcome(
        PURE["codec"].encode_entry, rtype, saga, step, body
    )
    for fn in ("unencodable", "plain_json"):
        assert getattr(NATIVE["encodable"], fn)(value) == getattr(PURE["encodable"], fn)(value), fn
    assert _mark_objects(NATIVE["encodable"].encodable(value)) == _mark_objects(PURE["encodable"].encodable(value))
    salt = "0f" * 16
    if _outcome(PURE["codec"].canonical, body)[0] == "ok":
        text = PURE["codec"].canonical(body)
        assert _outcome(NATIVE["codec"].content_digest, salt, text) == _outcome(
            PURE["codec"].content_digest, salt, text
        )


@needs_compiled
@settings(max_examples=examples(200), deadline=None)
@given(entries=_entries, at=st.integers(0, 5), field=st.sampled_from(["ts", "saga", "body", "prev", "salt", "seq"]))
def test_a_tampered_log_breaks_at_the_same_place_with_the_same_reason(entries: list[Any], at: int, field: str) -> None:
    data, _, _ = PURE["codec"].seal([(i + 1, *e) for i, e in enumerate(entries)], GENESIS)
    records = [json.loads(line) for line in data.splitlines()]
    victim = records[at % len(records)]
    victim[field] = {"ts": 1, "saga": "other", "body": {"x": 1}, "prev": "cd" * 32, "salt": "00" * 16, "seq": 99}[field]
    native = NATIVE["chain"].verify_records(records).to_dict()
    assert native == PURE["chain"].verify_records(records).to_dict()


def _write_and_verify(writer_env: dict[str, str], reader_env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    log = tmp_path / "twin.wal"
    write = textwrap.dedent(f"""
        import asyncio, json
        import agent_saga
        from agent_saga import FileWAL, saga_scope

        async def main():
            wal = FileWAL({str(log)!r})
            async with saga_scope(wal) as saga:
                for i in range(20):
                    await saga.execute(tool="t", semantics="REVERSIBLE", forward=lambda i=i: {{"n": i, "s": "é" * i}})
            wal.close()
        asyncio.run(main())
        print(json.dumps(agent_saga.speedups_active()))
    """)
    read = textwrap.dedent(f"""
        import json
        import agent_saga
        from agent_saga.log import verify_file
        print(json.dumps([agent_saga.speedups_active(), verify_file({str(log)!r}).to_dict()]))
    """)
    wrote = subprocess.run([sys.executable, "-c", write], env=writer_env, capture_output=True, text=True, check=True)
    got = subprocess.run([sys.executable, "-c", read], env=reader_env, capture_output=True, text=True, check=True)
    active, report = json.loads(got.stdout)
    return {"writer": json.loads(wrote.stdout), "reader": active, "report": report}


@needs_compiled
@pytest.mark.slow
@pytest.mark.parametrize("writer_pure", [True, False], ids=["pure-writes-compiled-reads", "compiled-writes-pure-reads"])
def test_a_log_written_by_one_form_verifies_with_the_other(writer_pure: bool, tmp_path: Path) -> None:
    pure = {**os.environ, speedups.PURE_ENV: "1"}
    native = {k: v for k, v in os.environ.items() if k != speedups.PURE_ENV}
    seen = _write_and_verify(pure if writer_pure else native, native if writer_pure else pure, tmp_path)
    assert (seen["writer"], seen["reader"]) == ((False, True) if writer_pure else (True, False))
    assert seen["report"]["status"] == "intact", seen["report"]
    assert seen["report"]["records"] == 2 + 20  # SAGA_STARTED, a record per REVERSIBLE step, SAGA_COMPLETED


def test_the_form_running_here_is_the_one_this_environment_asks_for() -> None:
    # tox -e core says AGENT_SAGA_EXPECT_SPEEDUPS=1: a compiled twin that silently fell back to
    # pure (stale, unloadable) fails here instead of passing the suite on the pure form.
    expect = os.environ.get("AGENT_SAGA_EXPECT_SPEEDUPS") == "1"
    forced_pure = os.environ.get(speedups.PURE_ENV) == "1"
    assert agent_saga.speedups_active() is (expect and not forced_pure), speedups.form()
    assert agent_saga.speedups_active() is speedups.speedups_active()
    speedups.install()  # a second call changes nothing
    assert agent_saga.speedups_active() is (expect and not forced_pure), speedups.form()
    codec = sys.modules["agent_saga.log.codec"]
    assert codec.__name__ == ("agent_saga_speedups.codec" if agent_saga.speedups_active() else "agent_saga.log.codec")


def test_the_build_compiles_the_twins_the_core_puts_in_place() -> None:
    tree = ast.parse((SPEEDUPS / "setup.py").read_text())
    twins = next(
        ast.literal_eval(node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TWINS" for t in node.targets)
    )
    assert tuple(twins) == speedups.TWINS


def _probe(tmp_path: Path, built_from: dict[str, str] | str, env: dict[str, str] | None = None) -> list[Any]:
    """Import agent_saga with a stand-in agent_saga_speedups package (a real directory on the path)."""
    package = tmp_path / "site" / "agent_saga_speedups"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "9.9"\nBUILT_FROM = {built_from!r}\n')
    for name in speedups.TWINS:  # pure copies: enough to see whether they are put in place
        (package / f"{name}.py").write_text((LOG_SOURCE / f"{name}.py").read_text())
    code = (
        "import json, sys, agent_saga\nfrom agent_saga.log import speedups\n"
        "print(json.dumps([speedups.speedups_active(), speedups.form(), sys.modules['agent_saga.log.codec'].__name__]))"
    )
    environ = {k: v for k, v in os.environ.items() if k != speedups.PURE_ENV}
    environ.update(PYTHONPATH=str(tmp_path / "site"), **(env or {}))
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_twin_built_from_these_sources_is_put_in_place(tmp_path: Path) -> None:
    built = {name: speedups._sha256(LOG_SOURCE / f"{name}.py") for name in speedups.TWINS}
    active, form, codec = _probe(tmp_path, built)
    assert (active, codec) == (True, "agent_saga_speedups.codec"), form
    assert form.startswith("compiled (agent-saga-speedups 9.9")


@pytest.mark.slow
def test_a_twin_built_from_other_sources_is_never_run(tmp_path: Path) -> None:
    built = {name: speedups._sha256(LOG_SOURCE / f"{name}.py") for name in speedups.TWINS}
    built["codec"] = "0" * 64  # compiled from an older codec.py: it could write other bytes
    active, form, codec = _probe(tmp_path, built)
    assert (active, codec) == (False, "agent_saga.log.codec")
    assert "compiled from another agent_saga/log/codec.py than this one: rebuild it" in form


@pytest.mark.slow
def test_agent_saga_pure_forces_the_pure_form(tmp_path: Path) -> None:
    built = {name: speedups._sha256(LOG_SOURCE / f"{name}.py") for name in speedups.TWINS}
    active, form, codec = _probe(tmp_path, built, {speedups.PURE_ENV: "1"})
    assert (active, form, codec) == (False, "pure Python (AGENT_SAGA_PURE is set)", "agent_saga.log.codec")


def test_doctor_says_which_form_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agent_saga.cli.main import main

    main(["doctor", "--root", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["hot_path"] == {"compiled": agent_saga.speedups_active(), "form": speedups.form()}
    main(["doctor", "--root", str(tmp_path)])
    expected = "compiled (agent-saga-speedups" if agent_saga.speedups_active() else "pure Python ("
    assert f"hot path: {expected}" in capsys.readouterr().out
