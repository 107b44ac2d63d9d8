"""Every verb that takes a saga id accepts the short id `graph` prints, resolved against the log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga import Compensation, FileWAL, KillSwitch, PreFlightGate, SagaQuarantined, saga_scope
from agent_saga.cli.main import main
from agent_saga.gate import FileSwitchStore
from agent_saga.log import read_records

pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *argv], capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.slow
def test_quarantine_by_the_short_id_graph_prints_freezes_that_saga(tmp_path: Path) -> None:
    store, log = tmp_path / "switch.json", tmp_path / "agent.wal"
    switch = KillSwitch(FileSwitchStore(store), poll_interval=0)
    charges: list[int] = []
    refunds: list[int] = []

    def charge() -> dict[str, int]:
        charges.append(len(charges) + 1)
        return {"id": charges[-1]}

    undo = lambda r: Compensation(fn=lambda: refunds.append(r["id"]))
    wal = FileWAL(log)
    with pytest.raises(SagaQuarantined), saga_scope(wal, gate=PreFlightGate(switch=switch)) as s:
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=charge, compensate=undo)
        short = s.saga_id[:8]
        drawn = run("graph", "--wal", str(log))
        assert short in drawn.stdout and s.saga_id not in drawn.stdout  # what a person copies
        frozen = run("quarantine", short, "--reason", "suspected duplicate charges", "--by", "soc@corp",
                     "--store", str(store), "--wal-path", str(log))
        assert frozen.returncode == 0, frozen.stderr
        assert s.saga_id in frozen.stdout  # it says which saga it froze
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=charge, compensate=undo)
    wal.close()
    assert charges == [1] and refunds == []  # the next charge never ran; nothing was unwound
    (record,) = [r for r in read_records(log) if r["type"] == "SWITCH_QUARANTINED"]
    assert record["saga"] == s.saga_id


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "ops.wal"
    wal = FileWAL(path)
    for saga in ("abc-1", "abc-2", "xyz-9", "pqr", "pqr-2"):
        wal.append("SAGA_STARTED", saga, {"name": "n"})
    wal.close()
    return path


def test_a_prefix_is_resolved_to_exactly_one_saga_or_refused(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "switch.json")
    common = ("--reason", "r", "--by", "soc@corp", "--store", store, "--wal-path", str(log))
    assert main(["quarantine", "abc", *common]) == 2
    err = capsys.readouterr().err
    assert "abc-1" in err and "abc-2" in err and "matches 2 sagas" in err
    assert main(["quarantine", "nope", *common]) == 2
    assert f"no saga in {log} has an id starting with 'nope'" in capsys.readouterr().err
    assert main(["status", "--store", store]) == 0  # nothing was quarantined by either
    assert main(["quarantine", "xy", *common]) == 0
    assert main(["quarantine", "pqr", *common]) == 0  # a whole id is that saga, even if it prefixes another
    assert sorted(q.saga_id for q in FileSwitchStore(store).load().quarantined) == ["pqr", "xyz-9"]
    assert main(["resume", "--saga", "xy", "--by", "soc@corp", "--store", store, "--wal-path", str(log)]) == 0
    assert [q.saga_id for q in FileSwitchStore(store).load().quarantined] == ["pqr"]
    capsys.readouterr()
    assert main(["graph", "--wal", str(log), "--saga", "abc"]) == 2
    assert "abc-1" in capsys.readouterr().err


def test_a_saga_id_with_no_log_to_check_it_against_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "switch.json")
    assert main(["quarantine", "2e78f498", "--reason", "r", "--by", "soc", "--store", store]) == 3
    err = capsys.readouterr().err
    assert "no log at agent-saga.wal" in err and "--wal-path" in err
    assert not Path("agent-saga.wal").exists()
    assert main(["quarantine", "2e78f498", "--reason", "r", "--by", "soc", "--store", store,
                 "--wal-path", str(tmp_path / "missing.wal")]) == 3
    assert not (tmp_path / "missing.wal").exists()
    assert main(["status", "--store", store]) == 0
