"""Every verb of `agent-saga`: help with an example, usage errors, unusable files.

The verbs run in process, through the same ``main(argv)`` that ``python -m agent_saga`` calls
(cli_support.py says what each call must leave as it found it); one test per entry point still
starts the real process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import Ran, run_cli
from house import WINGS

from agent_saga.cli.main import VERBS as VERB_TABLE
from agent_saga.cli.main import build_parser

# The core's own verbs; `mcp` comes with agent-saga-mcp (test_cli_mcp.py).
VERBS = ["adopt", "animate", "approvals", "certify", "corpus", "demo", "doctor", "drain", "escalations", "export",
         "graph", "halt", "init-host", "mesh", "new", "quarantine", "reconcile", "recover", "repair", "resume",
         "settle", "signal", "snapshots", "status", "synthesize", "ui", "verify", "viz"]


def cli(*args: str) -> Ran:
    return run_cli(*args)


def test_every_registered_verb_is_covered_here() -> None:
    parser = build_parser()
    (verbs,) = [a for a in parser._actions if a.dest == "verb"]
    assert sorted(verbs.choices) == VERBS  # type: ignore[arg-type]


# Every wing's face, for the test below (house.py reads them from the import contract).
_WING_PREFIXES = tuple(f"{wing}." for wing in WINGS)


@pytest.mark.slow  # a fresh interpreter, so that what is imported is what the command imported
def test_the_help_lists_every_verb_and_imports_no_wing_and_a_verb_only_its_own() -> None:
    code = (
        "import json, sys\n"
        "from agent_saga.cli.main import build_parser\n"
        "parser = build_parser()\n"
        "help_text = parser.format_help()\n"
        "after_help = sorted(m for m in sys.modules if m.startswith('agent_saga.'))\n"
        "parser.parse_args(['mesh', 'merge', 'a.wal', '--out', 'b.wal'])\n"
        "after_mesh = sorted(m for m in sys.modules if m.startswith('agent_saga.'))\n"
        "print(json.dumps([help_text, after_help, after_mesh]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    help_text, after_help, after_mesh = json.loads(out.stdout)
    assert [m for m in after_help if m.startswith(_WING_PREFIXES) or m in WINGS] == []
    assert {m.partition("._")[0] for m in after_mesh if m.startswith(_WING_PREFIXES)} == {"agent_saga.mesh"}
    listed = " ".join(help_text.split())  # argparse wraps the lines
    for verb, (_module, text) in VERB_TABLE.items():  # each verb with its help line, in the table's order
        assert f" {verb} {text} " in listed, verb
    assert [listed.index(f" {verb} ") for verb in VERB_TABLE] == sorted(listed.index(f" {v} ") for v in VERB_TABLE)


@pytest.mark.parametrize("verb", VERBS)
def test_help_shows_an_example(verb: str) -> None:
    out = cli(verb, "--help")
    assert out.returncode == 0
    assert "example" in out.stdout and f"agent-saga {verb}" in out.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_an_unknown_flag_is_a_usage_error(verb: str) -> None:
    out = cli(verb, "--no-such-flag")
    assert out.returncode == 2
    # argparse names the first problem: a missing required flag, or the unknown one
    assert f"agent-saga {verb}: error:" in out.stderr and "Traceback" not in out.stderr


def test_no_verb_is_a_usage_error() -> None:
    out = cli()
    assert out.returncode == 2 and "VERB" in out.stderr


@pytest.mark.parametrize(("verb", "args"), [
    ("verify", ["--wal-path", "{missing}"]),
    ("export", ["--wal-path", "{missing}", "--out", "{tmp}/bundle"]),
    ("certify", ["--wal-path", "{missing}"]),
    ("graph", ["--wal", "{missing}"]),
    ("corpus", ["--wal-path", "{missing}", "--out", "{tmp}/corpus.jsonl"]),
    ("recover", ["--wal-path", "{missing}"]),
    ("synthesize", ["--fit", "{missing}", "--profile-out", "{tmp}/profile.json"]),
    ("synthesize", ["--profile", "{missing}", "--out", "{tmp}/synthetic.wal"]),
    ("reconcile", ["--wal-path", "{missing}"]),
    ("signal", ["s1", "go", "--wal-path", "{missing}"]),
    ("escalations", ["--wal-path", "{missing}"]),
    ("settle", ["e1", "--not-landed", "--operator", "o", "--reason", "r", "--operator-key", "{tmp}/o.key",
                "--wal-path", "{missing}"]),
    ("status", ["--store", "{tmp}"]),  # a directory where the switch file should be
    ("halt", ["--scope", "global", "--reason", "r", "--by", "me", "--store", "{tmp}"]),
    ("drain", ["--reason", "r", "--by", "me", "--store", "{tmp}"]),
    ("quarantine", ["s1", "--reason", "r", "--by", "me", "--store", "{tmp}"]),
    ("resume", ["--scope", "global", "--by", "me", "--store", "{tmp}"]),
    ("demo", ["--dir", "/proc/agent-saga-cannot-write-here"]),
    ("adopt", ["--root", "{missing}", "--out", "{tmp}/saga_tools.py"]),
    ("doctor", ["--root", "{missing}"]),
    ("new", ["myagent", "--dir", "/proc/agent-saga-cannot-write-here"]),
    ("approvals", ["list", "--store", "/dev/null"]),  # a device where the requests directory should be
    # (deny: a grant would first be refused for want of a signing key, a usage error)
    ("approvals", ["deny", "af83c011", "--approver", "me", "--store", "/dev/null"]),
])
def test_an_unusable_file_is_named_without_a_traceback(verb: str, args: list[str], tmp_path: Path) -> None:
    filled = [a.format(missing=tmp_path / "missing.wal", tmp=tmp_path) for a in args]
    out = cli(verb, *filled)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"agent-saga {verb}:")
    named = str(tmp_path / "missing.wal") if "{missing}" in " ".join(args) else None
    if named:
        assert named in out.stderr


# Every verb that reads a log: --wal-path, its alias --wal, and $AGENT_SAGA_WAL when neither is given.
LOG_READERS = {
    "verify": [], "export": ["--out", "{tmp}/bundle"], "certify": [], "recover": [], "escalations": [],
    "graph": [], "animate": ["-o", "{tmp}/a.svg"], "viz": ["--kind", "fleet", "-o", "{tmp}/v.svg"], "ui": [],
    "reconcile": [], "corpus": ["--out", "{tmp}/corpus.jsonl"],
    "settle": ["e1", "--not-landed", "--operator", "o", "--reason", "r", "--operator-key", "{tmp}/o.key"],
}


@pytest.mark.parametrize("verb", sorted(LOG_READERS))
@pytest.mark.parametrize("flag", ["--wal-path", "--wal"])
def test_every_log_reading_verb_takes_wal_path_and_its_alias(verb: str, flag: str) -> None:
    extra = [a.replace("{tmp}", "/tmp") for a in LOG_READERS[verb]]
    args = build_parser().parse_args([verb, flag, "some.wal", *extra])
    assert args.wal_path == "some.wal"


@pytest.mark.parametrize("verb", sorted(LOG_READERS))
def test_every_log_reading_verb_honours_agent_saga_wal(verb: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "from-env.wal"
    extra = [a.replace("{tmp}", str(tmp_path)) for a in LOG_READERS[verb]]
    monkeypatch.setenv("AGENT_SAGA_WAL", str(missing))
    out = cli(verb, *extra)
    assert out.returncode == 3, out.stderr
    assert str(missing) in out.stderr and "Traceback" not in out.stderr


def test_version_names_the_distribution_and_its_version() -> None:
    from agent_saga import __version__

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"agent-saga {__version__}"


@pytest.mark.slow
def test_python_dash_m_agent_saga_runs_the_same_main() -> None:
    # The smoke test of the entry point itself: the real process, its exit code, its streams.
    from agent_saga import __version__

    version = subprocess.run([sys.executable, "-m", "agent_saga", "--version"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert version.returncode == 0 and version.stdout.strip() == f"agent-saga {__version__}"
    missing = subprocess.run([sys.executable, "-m", "agent_saga", "verify"], capture_output=True, text=True,
                             timeout=60, check=False, env={**os.environ, "AGENT_SAGA_WAL": "/nonexistent/x.wal"})
    assert missing.returncode == 3 and missing.stderr.startswith("agent-saga verify:"), missing.stderr
    assert "/nonexistent/x.wal" in missing.stderr and "Traceback" not in missing.stderr
