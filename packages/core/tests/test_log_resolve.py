"""One answer to "which log" (issue 31 item 2): the library's default log and the CLI's follow one rule.

``$AGENT_SAGA_WAL`` (or ``--wal-path``/``--wal``) names the log, else ``./agent-saga.wal``;
a known URL scheme is a server log, an unknown ``scheme://`` is refused, anything else is a
file. The server cases run against real servers in ``fleet/test_which_log.py``; here, the
file case, and that a URL is never taken for a file path (which created directories named
after the URL in the working directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import ActionSemantics, FileWAL, saga_scope
from agent_saga.cli.main import main
from agent_saga.log import set_default_wal
from agent_saga.log.default import default_wal
from agent_saga.log.resolve import SCHEMES, backend_of, default_target, is_url


@pytest.fixture(autouse=True)
def _no_chosen_default() -> Iterator[None]:
    set_default_wal(None)
    yield
    set_default_wal(None)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# A port nothing listens on and a socket that does not exist: the server is refused at once.
SERVER_URLS = [
    "redis://127.0.0.1:1/0",
    "rediss://127.0.0.1:1/0",
    "unix:///nonexistent/agent-saga-test.sock",
    "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2",
    "postgres://nobody@127.0.0.1:1/none?connect_timeout=2",
]


@pytest.mark.parametrize("url", SERVER_URLS)
def test_a_url_in_the_environment_is_never_a_file(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the fix: default_wal() returned FileWAL('./redis:/127.0.0.1:1/0') and made those directories.
    monkeypatch.setenv("AGENT_SAGA_WAL", url)
    before = _tree(tmp_path)
    try:
        wal = default_wal()
    except Exception:  # no server there, or its extra not installed: either way not a file
        wal = None
    assert not isinstance(wal, FileWAL), wal
    assert _tree(tmp_path) == before, "the URL was taken for a path and created on disk"


@pytest.mark.parametrize("url", SERVER_URLS)
def test_set_default_wal_takes_a_url_as_a_url(url: str, tmp_path: Path) -> None:
    before = _tree(tmp_path)
    try:
        wal = set_default_wal(url)
    except Exception:  # no server there, or its extra not installed
        wal = None
    assert not isinstance(wal, FileWAL) and _tree(tmp_path) == before


def test_an_unknown_scheme_is_refused_in_one_line_naming_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SAGA_WAL", "s3://bucket/agent-saga.wal")
    with pytest.raises(ValueError, match=r"'s3://bucket/agent-saga.wal': unknown log URL scheme; use a file path "
                                         r"or one of postgresql://.*redis://"):
        default_wal()
    assert _tree(tmp_path) == set()


@given(st.sampled_from(sorted(SCHEMES)), st.text(max_size=30), st.booleans())
def test_file_or_url_is_one_rule(scheme: str, rest: str, upper: bool) -> None:
    value = f"{scheme.upper() if upper else scheme}://{rest}"
    assert is_url(value) and backend_of(value) == SCHEMES[scheme]
    assert backend_of(f"./{scheme}/{rest.replace('://', '')}") == "file"


def test_the_default_is_the_environment_else_agent_saga_wal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_target() == "agent-saga.wal"
    monkeypatch.setenv("AGENT_SAGA_WAL", "")
    assert default_target() == "agent-saga.wal"  # set but empty is unset, as for every verb
    monkeypatch.setenv("AGENT_SAGA_WAL", "redis://h/0")
    assert default_target() == "redis://h/0"


@pytest.mark.parametrize("value", [None, "logs/ops.wal"])
def test_the_library_and_the_verbs_open_the_same_file(
    value: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if value is not None:
        monkeypatch.setenv("AGENT_SAGA_WAL", value)
    expected = tmp_path / (value or "agent-saga.wal")
    (tmp_path / "logs").mkdir()
    with saga_scope(name="order") as s:
        s.execute(tool="db.insert", semantics=ActionSemantics.IRREVERSIBLE, forward=lambda: None)
    wal = default_wal()
    assert isinstance(wal, FileWAL) and wal.path == expected
    wal.close()
    capsys.readouterr()
    assert main(["verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == len(list(FileWAL(expected).records()))
    assert main(["doctor", "--json"]) == 0  # the fallback is a warning here, a blocker only with --deploy
    findings = json.loads(capsys.readouterr().out)["findings"]
    log_findings = [f["message"] for f in findings if f["check"] in ("log", "chain")]
    if value is None:  # doctor alone treats the ./agent-saga.wal fallback as a finding
        assert len(log_findings) == 1 and "AGENT_SAGA_WAL is not set" in log_findings[0]
    else:
        assert log_findings == []
    # doctor takes the one log option, alias included
    assert main(["doctor", "--json", "--wal", str(expected)]) == 0
    capsys.readouterr()


def test_every_log_verb_takes_the_one_option_and_its_alias() -> None:
    from agent_saga.cli.main import build_parser

    parser = build_parser()
    for argv in (["doctor"], ["approvals", "approve", "x", "--approver", "a"], ["verify"], ["halt", "--reason", "r",
                                                                                            "--by", "b"]):
        for flag in ("--wal-path", "--wal"):
            assert parser.parse_args([*argv, flag, "redis://h/0"]).wal_path == "redis://h/0", (argv, flag)


@pytest.mark.parametrize("verb", ["verify", "certify", "recover", "graph", "escalations"])
def test_a_mistyped_log_url_says_how_it_was_read(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # An unknown scheme is refused as a URL, never looked for as a file of that name.
    assert main([verb, "--wal-path", "postgresq://db/agents"]) == 2
    assert "'postgresq://db/agents': unknown log URL scheme; use a file path or one of postgresql://" \
        in capsys.readouterr().err
    # No scheme at all: a file path, and the message says so, with the schemes a URL would need.
    assert main([verb, "--wal-path", "postgres:/db/agents"]) == 3
    err = capsys.readouterr().err
    assert "postgres:/db/agents" in err and "it was read as a file path (a log URL starts with one of postgresql://" in err
    assert _tree(tmp_path) == set()  # and nothing was created for either
