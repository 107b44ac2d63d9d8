"""One answer to "which log" (issue 31 item 2): for a file, a postgresql:// and a redis:// value of
``$AGENT_SAGA_WAL``, the library's ``default_wal()`` and every verb that reads or writes a log
(verify, certify, graph, recover, escalations, doctor, halt, approvals) open the same log.

Each verb is run in process (``main([...])``), with only the environment naming the log, and
what it reads or writes is checked against what the library wrote or reads back.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import trusted_key
from gate_support import req

from agent_saga import ActionSemantics, Compensation, FileApprovalStore, FileWAL, SagaAborted, saga_scope
from agent_saga.approvals._entry import new_entry
from agent_saga.cli.main import main
from agent_saga.gate import ApprovalRequest
from agent_saga.log import set_default_wal
from agent_saga.log.default import default_wal
from agent_saga.log.postgres import PostgresWAL
from agent_saga.log.redis import RedisWAL

C = ActionSemantics.COMPENSABLE
KINDS = {"file": FileWAL, "postgres": PostgresWAL, "redis": RedisWAL}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh log of this kind, named by $AGENT_SAGA_WAL alone."""
    if kind == "file":
        value = str(tmp_path / "volume" / "ops.wal")
    else:
        base = request.getfixturevalue("pg" if kind == "postgres" else "rd")
        value = f"{base}{'&' if '?' in base else '?'}log=which-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("AGENT_SAGA_WAL", value)
    set_default_wal(None)
    yield value
    default_wal().close()
    set_default_wal(None)


def _types() -> list[str]:
    """The record types of the log the library's default names, read afresh."""
    wal = default_wal()
    wal.barrier()
    return [r["type"] for r in wal.records()]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    default_wal().close()  # a verb opens the log itself, as a separate process would
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    if code != 0:
        print(captured.err)  # shown with the failing assertion
    return code, captured.out


def test_the_library_and_every_verb_open_the_log_agent_saga_wal_names(
    kind: str, target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wal = default_wal()
    assert type(wal) is KINDS[kind], f"AGENT_SAGA_WAL={target} opened {wal!r}"
    if kind == "file":
        assert wal.location == target
    else:
        assert not any(p.name.endswith(":") for p in Path.cwd().rglob("*")), "a URL became directories"
    with saga_scope(name="order") as s:
        s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 1},
                  compensate=lambda r: Compensation(fn=lambda: None, description="undo"))
    with pytest.raises(SagaAborted), saga_scope(name="undone") as s:
        undone = s.saga_id
        s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 2},
                  compensate=lambda r: Compensation(fn=lambda: None, description="undo"))
        raise RuntimeError("model gave up")
    written = _types()
    assert written.count("SAGA_STARTED") == 2

    code, out = _run(capsys, "verify", "--json")
    assert code == 0 and json.loads(out)["records"] == len(written), out
    code, out = _run(capsys, "certify", "--json")
    assert code == 0 and json.loads(out)["effects"] == 2, out
    code, out = _run(capsys, "graph", "--saga", undone[:8])
    assert code == 0 and "db.insert" in out, out
    code, out = _run(capsys, "recover")
    assert code == 0 and "0 open saga(s)" in out, out
    code, out = _run(capsys, "escalations")
    assert code == 0 and "0 open escalation(s)" in out, out

    # doctor checks the log $AGENT_SAGA_WAL names, as a log of its own kind
    (tmp_path / "project").mkdir()
    code, out = _run(capsys, "doctor", "--json", "--root", str(tmp_path / "project"))
    assert code == 0, out
    assert [f for f in json.loads(out)["findings"] if f["check"] in ("log", "chain")] == []

    # the verbs that write: the kill switch and an approval land in the library's log
    code, out = _run(capsys, "halt", "--scope", "tool:wire.send", "--reason", "which log", "--by", "soc@corp",
                     "--store", str(tmp_path / "switch.json"))
    assert code == 0, out
    assert _types()[-1] == "SWITCH_HALTED"
    store = FileApprovalStore(tmp_path / "approvals")
    entry, _ = store.create(new_entry(ApprovalRequest(req("wire.send", "IRREVERSIBLE", saga="saga-1"),
                                                      "irreversible", "cannot be undone"),
                                      time.time(), 900.0, ((("@oncall",), 0.0),)))
    trusted_key().save()
    code, out = _run(capsys, "approvals", "approve", entry.id, "--approver", "risk@corp", "--store", str(store.path))
    assert code == 0 and "approved: wire.send" in out, out
    assert _types()[-1] == "APPROVAL_GRANTED"


def test_doctor_takes_the_one_log_option(kind: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    wal = default_wal()
    wal.append("SAGA_STARTED", "saga-1", {"name": "n"})
    wal.barrier()
    wal.close()
    monkeypatch.delenv("AGENT_SAGA_WAL")
    for flag in ("--wal-path", "--wal"):
        capsys.readouterr()
        code = main(["doctor", "--json", "--root", str(tmp_path), flag, target])
        out = capsys.readouterr().out
        findings: list[dict[str, Any]] = json.loads(out)["findings"]
        assert code == 0 and [f for f in findings if f["check"] == "log"] == [], out


def test_set_default_wal_opens_a_url_as_its_server_log(kind: str, target: str) -> None:
    chosen = set_default_wal(target)
    assert type(chosen) is KINDS[kind] and default_wal() is chosen
    chosen.append("SAGA_STARTED", "saga-1", {"name": "n"})
    chosen.barrier()
    assert [r["type"] for r in chosen.records()] == ["SAGA_STARTED"]
