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


@pytest.mark.slow
def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path", str(tmp_path / "x.wal")],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert "no such file" in proc.stderr


# -- verify first, one message, no rough edges ---------------------------------------------


def forge_completion(path: Path, saga_id: str) -> None:
    """What an agent with write access does: end its own open saga with a plain line."""
    last = json.loads(path.read_bytes().splitlines()[-1])
    with open(path, "ab") as fh:
        fh.write(json.dumps({"seq": last["seq"] + 1, "ts": last["ts"] + 1, "type": "SAGA_COMPLETED",
                             "saga": saga_id, "body": {"steps": 1}}).encode() + b"\n")


def open_saga_log(path: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", (
        "import os, sys\n"
        "from agent_saga import ActionSemantics, Compensation, FileWAL, saga_scope\n"
        "wal = FileWAL(sys.argv[1])\n"
        "s = saga_scope(wal).__enter__()\n"
        "s.execute(tool='stripe.charge', semantics=ActionSemantics.COMPENSABLE, forward=lambda: {'id': 'ch_1'},\n"
        "          compensate=lambda r: Compensation(fn=lambda: None, description='refund'))\n"
        "wal.barrier(); print(s.saga_id, flush=True); os._exit(1)\n"
    ), str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow
def test_a_forged_completion_line_never_makes_a_log_certified(wal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saga_id = open_saga_log(wal_path)
    assert main(["certify", "--wal-path", str(wal_path)]) == 1
    assert capsys.readouterr().out.startswith("NOT CERTIFIED")
    forge_completion(wal_path, saga_id)
    assert main(["certify", "--wal-path", str(wal_path)]) == 1
    captured = capsys.readouterr()
    assert "CERTIFIED" not in captured.out.replace("NOT CERTIFIED", "")
    (line,) = captured.err.splitlines()
    assert "seq 4 (line 4)" in line and "--allow-unverified" in line
    # The override lists the effects but never certifies over a broken chain.
    assert main(["certify", "--wal-path", str(wal_path), "--allow-unverified"]) == 1
    assert "chain: BROKEN at seq 4" in capsys.readouterr().out


def test_export_refuses_an_unchained_log_and_names_only_the_cli_flag(wal_path: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with FileWAL(wal_path, chain=False) as wal:
        wal.append("SAGA_STARTED", "a", {})
    assert main(["export", "--wal-path", str(wal_path), "--out", str(tmp_path / "b")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "--allow-broken" in line and "allow_broken=True" not in line
    assert "no hash chain" in line
    assert not (tmp_path / "b").exists()
    from agent_saga.audit import ChainBroken, export_bundle

    with pytest.raises(ChainBroken) as info:
        export_bundle(wal_path, tmp_path / "c")
    assert "allow_broken=True" in str(info.value) and "--allow-broken" not in str(info.value)


def test_an_empty_log_says_empty_everywhere(wal_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wal_path.write_bytes(b"")
    assert main(["verify", "--wal-path", str(wal_path)]) == 0
    out = capsys.readouterr().out
    assert "chain: empty" in out and "intact" not in out
    assert main(["export", "--wal-path", str(wal_path), "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "exported 0 records (empty log)" in out and "None" not in out


def test_an_empty_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in (["verify"], ["certify"], ["export", "--out", "o"]):
        assert main([*verb, "--wal-path", ""]) == 2
        err = capsys.readouterr().err
        assert "--wal-path is empty" in err and "directory" not in err


@pytest.mark.slow
def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.wal"
    os.mkfifo(fifo)
    for verb in (["verify"], ["certify"], ["export", "--out", str(tmp_path / "o")]):
        proc = subprocess.run([sys.executable, "-m", "agent_saga", *verb, "--wal-path", str(fifo)],
                              capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 3, proc.stderr
        assert "FIFO" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.splitlines()) == 1


@pytest.mark.slow
def test_a_closed_pipe_ends_the_command_quietly(wal_path: Path) -> None:
    """`agent-saga verify ... | head -0`: the reader is gone before we write; no 'Broken pipe' noise."""
    import os

    good_log(wal_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path", str(wal_path)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=30, check=False)
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 141  # as a shell reports a command ended by SIGPIPE
