"""`agent-saga graph`: real parsers accept the output, and outcomes are drawn apart."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_support import Ran, run_cli
from viz_logs import write_mixed_log

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold
from agent_saga.ui import build, to_dot, to_mermaid

MERMAID = Path(__file__).parent / "mermaid"


def cli(*args: str) -> Ran:
    return run_cli(*args)  # in process (cli_support.py); test_cli.py runs the real one


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One log with a clean unwind, a failed undo, an orphan, a completed and an open saga."""
    return write_mixed_log(tmp_path_factory.mktemp("graph") / "mixed.wal")


def model(path: Path):  # type: ignore[no-untyped-def]
    return {s.name: s for s in build(fold(read_records(path)).values())}


def test_model_tells_clean_from_partial(mixed_log: Path) -> None:
    sagas = model(mixed_log)
    assert sagas["clean-one"].clean and sagas["clean-one"].verdict == "rollback clean"
    partial = sagas["partial"]
    assert not partial.clean
    assert [(s.tool, s.outcome) for s in partial.unwound] == [
        ("crm.update", "failed"), ("mail.send", "unresolved"), ("pay.charge", "unresolved")]
    assert partial.verdict.startswith("rollback NOT CLEAN")
    assert sagas["fine"].status == "completed"
    assert sagas["crashed"].status == "open" and "1 effect(s) may be standing" in sagas["crashed"].verdict


def test_orphans_get_their_own_outcome(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "o.wal")
    with pytest.raises(SagaAborted), saga_scope(wal, name="orphan") as s:
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: 1)
        raise RuntimeError
    wal.close()
    (saga,) = build(fold(read_records(tmp_path / "o.wal")).values())
    assert [s.outcome for s in saga.unwound] == ["orphaned"] and not saga.clean
    assert "ORPHANED - no undo exists" in to_mermaid([saga])


@pytest.mark.slow
def test_mermaid_output_parses_with_mermaid_itself(mixed_log: Path, tmp_path: Path) -> None:
    assert (MERMAID / "node_modules" / "mermaid").is_dir(), (
        "Mermaid's parser is not installed: run `npm ci --prefix packages/core/tests/mermaid` "
        "(scripts/test does this)")
    out = cli("graph", "--wal", str(mixed_log))
    assert out.returncode == 0, out.stderr
    (tmp_path / "all.mmd").write_text(out.stdout)
    one = cli("graph", "--wal", str(mixed_log), "--saga", "open-saga", "-o", str(tmp_path / "one.mmd"))
    assert one.returncode == 0, one.stderr
    parsed = subprocess.run(["node", str(MERMAID / "parse.mjs"), str(tmp_path / "all.mmd"),
                             str(tmp_path / "one.mmd")], capture_output=True, text=True, timeout=120, check=False)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    # quotes and angle brackets from the cause did not break the label
    assert "#quot;no#quot; #lt;stop#gt;" in out.stdout


@pytest.mark.slow
def test_mermaid_parser_rejects_a_broken_diagram(tmp_path: Path) -> None:
    # The check above is only worth something if the parser can say no.
    (tmp_path / "bad.mmd").write_text('flowchart TD\n  a["unclosed --> b\n')
    parsed = subprocess.run(["node", str(MERMAID / "parse.mjs"), str(tmp_path / "bad.mmd")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert parsed.returncode == 1 and "ERR" in parsed.stdout


@pytest.mark.slow
def test_dot_output_renders_with_graphviz(mixed_log: Path) -> None:
    assert shutil.which("dot"), "Graphviz is not installed: scripts/services installs it"
    out = cli("graph", "--wal", str(mixed_log), "--format", "dot")
    assert out.returncode == 0
    svg = subprocess.run(["dot", "-Tsvg"], input=out.stdout, capture_output=True, text=True, check=False)
    assert svg.returncode == 0, svg.stderr
    assert svg.stdout.count("<g id=\"node") >= 12


def test_the_three_outcomes_are_styled_apart(mixed_log: Path, tmp_path: Path) -> None:
    sagas = list(model(mixed_log).values())
    mermaid = to_mermaid(sagas)
    styles = {name: re.search(rf"classDef {name} (\S+)", mermaid).group(1)  # type: ignore[union-attr]
              for name in ("compensated", "failed", "orphaned")}
    assert len(set(styles.values())) == 3
    assert "dasharray" in styles["orphaned"] and "stroke-width:4px" in styles["failed"]
    dot = to_dot(sagas)
    failed_line = next(x for x in dot.splitlines() if "COMPENSATION FAILED" in x)
    clean_line = next(x for x in dot.splitlines() if "\\ncompensated" in x)
    assert "penwidth=4" in failed_line and "penwidth=2" in clean_line
    # a partial rollback's verdict never wears the clean style
    verdict = next(x for x in mermaid.splitlines() if "rollback NOT CLEAN" in x)
    assert verdict.endswith(":::dirty")


@pytest.mark.slow
def test_graph_help_usage_and_missing_file(tmp_path: Path) -> None:
    help_ = cli("graph", "--help")
    assert help_.returncode == 0 and "example" in help_.stdout
    default = cli("graph")  # no --wal: $AGENT_SAGA_WAL, else ./agent-saga.wal, like every verb
    assert default.returncode == 3 and "no log at agent-saga.wal" in default.stderr
    missing = cli("graph", "--wal", str(tmp_path / "nope.wal"))
    assert missing.returncode == 3 and "no log at" in missing.stderr and "Traceback" not in missing.stderr
    assert cli("graph", "--wal", str(tmp_path)).returncode == 3


@pytest.mark.slow
def test_unknown_saga_prefix_is_a_usage_error(mixed_log: Path) -> None:
    out = cli("graph", "--wal", str(mixed_log), "--saga", "zzzz")
    assert out.returncode == 2 and "no saga" in out.stderr
