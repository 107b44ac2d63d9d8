"""agent-saga verify / export / certify: exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga import ActionSemantics, FileWAL, SagaAborted, saga_scope
from agent_saga.cli.main import main


def good_log(path: Path) -> None:
    with FileWAL(path) as wal, saga_scope(wal) as s:
        s.execute(tool="mail.send", semantics=ActionSemantics.IRREVERSIBLE, forward=lambda: "ok")


def stranded_log(path: Path) -> str:
    with FileWAL(path) as wal:
        with pytest.raises(SagaAborted), saga_scope(wal) as s:
            s.execute(tool="mail.send", semantics=ActionSemantics.IRREVERSIBLE, forward=lambda: "ok")
            raise RuntimeError("stop")
        return s.saga_id


def test_verify_exit_codes(wal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good_log(wal_path)
    assert main(["verify", "--wal-path", str(wal_path)]) == 0
    assert "chain: intact" in capsys.readouterr().out
    lines = wal_path.read_bytes().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    wal_path.write_bytes(b"".join(x + b"\n" for x in lines))
    assert main(["verify", "--wal-path", str(wal_path)]) == 1
    out = capsys.readouterr().out
    assert "FIRST BAD RECORD: seq 3 (line 2)" in out
    assert "BROKEN at seq 3" in out
    assert main(["verify", "--wal-path", str(wal_path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["bad_seq"] == 3


def test_verify_reports_unchained_as_a_finding(wal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    assert main(["verify", "--wal-path", str(wal_path)]) == 1
    assert "chain: unchained" in capsys.readouterr().out


def test_verify_uses_the_default_log_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good_log(tmp_path / "agent-saga.wal")  # the autouse fixture made tmp_path the cwd
    assert main(["verify"]) == 0


def test_missing_or_unreadable_logs_exit_3_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for verb in (["verify"], ["certify"], ["export", "--out", str(tmp_path / "o")]):
        assert main([*verb, "--wal-path", str(tmp_path / "nope.wal")]) == 3
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "no such file" in err
        assert err.startswith(f"agent-saga {verb[0]}: ")
        assert main([*verb, "--wal-path", str(tmp_path)]) == 3
        assert "is a directory" in capsys.readouterr().err


def test_usage_errors_exit_2(wal_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["verify", "--bogus"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["export", "--wal-path", str(wal_path)])  # --out is required
    assert info.value.code == 2


def test_export_exit_codes(wal_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good_log(wal_path)
    out = tmp_path / "bundle"
    assert main(["export", "--wal-path", str(wal_path), "--out", str(out)]) == 0
    assert "sha256sum -c SHA256SUMS" in capsys.readouterr().out
    assert main(["export", "--wal-path", str(wal_path), "--out", str(out)]) == 3
    assert "written once" in capsys.readouterr().err
    wal_path.write_bytes(wal_path.read_bytes().replace(b'"type":"STEP_INTENT"', b'"type":"STEP_INTENX"'))
    assert main(["export", "--wal-path", str(wal_path), "--out", str(tmp_path / "b2")]) == 1
    assert "--allow-broken" in capsys.readouterr().err
    assert not (tmp_path / "b2").exists()
    assert main(["export", "--wal-path", str(wal_path), "--out", str(tmp_path / "b3"), "--allow-broken"]) == 1
    assert "chain: BROKEN at seq 2" in capsys.readouterr().out
    assert json.loads((tmp_path / "b3" / "manifest.json").read_text())["chain"].startswith("BROKEN at seq 2")


def test_certify_exit_codes(wal_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good_log(wal_path)
    assert main(["certify", "--wal-path", str(wal_path)]) == 0
    assert capsys.readouterr().out.startswith("CERTIFIED: 1 of 1")
    other = tmp_path / "stranded.wal"
    saga_id = stranded_log(other)
    assert main(["certify", "--wal-path", str(other)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NOT CERTIFIED")
    assert f"saga {saga_id} step 1 mail.send [IRREVERSIBLE]" in out
    assert main(["certify", "--wal-path", str(other), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["certified"] is False
    assert data["unaccounted"][0]["tool"] == "mail.send"


def test_help_shows_an_example_for_each_verb(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in ("verify", "export", "certify"):
        with pytest.raises(SystemExit) as info:
            main([verb, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert f"example:\n  agent-saga {verb} --wal-path ./agent-saga.wal" in out
        assert "exit codes:" in out


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path", str(tmp_path / "x.wal")],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert "no such file" in proc.stderr
