"""RepairSession (issue 27 part 1) on a FileWAL: open's refusals, the records, resume, abandon, the daemon.

The same scenarios run on PostgresWAL and RedisWAL in fleet/test_repair_servers.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import repair_world as world
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from operator_support import untrusted_operator_key
from repair_checks import (
    LATER,
    OPERATOR,
    WHY,
    check_a_failed_continuation_unwinds_everything_once,
    check_a_second_open_is_refused,
    check_an_abandoned_repair_is_finished_by_the_daemon,
    check_the_seed_snippet,
    dead_onboarding,
    repair_world,
    signer,
    types,
)

from agent_saga import (
    Compensation,
    ConfigurationError,
    FileWAL,
    KillSwitch,
    MemoryWAL,
    PreFlightGate,
    RecoveryDaemon,
    RepairClosed,
    RepairRefused,
    RepairSession,
    SagaQuarantined,
    saga_scope,
)
from agent_saga.audit import verify_records
from agent_saga.cli.main import main
from agent_saga.gate import FileSwitchStore
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold
from agent_saga.recovery.lease import configure_leases, lease_keeper
from agent_saga.recovery.repair import plan_of

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("repair_world")


async def test_the_seed_snippet_runs_with_a_real_continuation(wal: FileWAL) -> None:
    await check_the_seed_snippet(wal, wal.path)


async def test_a_failed_continuation_unwinds_the_whole_transaction_once(wal: FileWAL) -> None:
    await check_a_failed_continuation_unwinds_everything_once(wal, wal)


async def test_a_second_operator_cannot_open_the_same_saga(wal: FileWAL) -> None:
    await check_a_second_open_is_refused(wal, wal.path)


async def test_an_abandoned_repair_is_unwound_by_the_daemon(wal: FileWAL) -> None:
    await check_an_abandoned_repair_is_finished_by_the_daemon(wal, wal)


async def test_a_live_saga_is_refused(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)  # this process still renews its lease: judged now, it is live
    with pytest.raises(RepairRefused, match=r"the saga is live: its owner \S+ holds its lease"):
        RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY)
    assert "REPAIR_OPENED" not in types(wal, saga_id)


async def test_a_finished_saga_is_refused(wal: FileWAL) -> None:
    async with saga_scope(wal) as saga:
        await world.account_and_charge(saga)
    with pytest.raises(RepairRefused, match="the saga is finished: it ended with SAGA_COMPLETED"):
        RepairSession.open(wal, saga.saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    # ... and so is one an earlier repair continued.
    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    session.amend(postcode="SW1A 1AA")
    await session.resume(world.onboard, wal=wal)
    with pytest.raises(RepairRefused, match=f"continued as saga {session.continued_as} by an earlier repair"):
        RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with pytest.raises(RepairClosed, match="is resumed"):
        session.amend(postcode="E1 6AN")


async def test_closure_compensations_are_refused_naming_each_step(wal: FileWAL) -> None:
    boundary = saga_scope(wal, name="closures")
    saga = await boundary.__aenter__()
    for n in (1, 2):
        await saga.execute(tool=f"crm.tag_{n}", semantics="COMPENSABLE", forward=lambda: {"ok": True},
                           compensate=lambda r: Compensation(fn=lambda: None, description="untag in memory"))
    await world.account_and_charge(saga)  # steps 3 and 4: registry-backed, fine
    wal.barrier()
    with pytest.raises(RepairRefused) as refused:
        RepairSession.open(wal, saga.saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    blockers = refused.value.blockers
    assert len(blockers) == 2
    assert blockers[0].startswith("step 1 'crm.tag_1' is COMPENSABLE but its undo 'untag in memory' is a closure")
    assert blockers[1].startswith("step 2 'crm.tag_2' is COMPENSABLE")
    assert "step 1 'crm.tag_1'" in str(refused.value) and "step 2 'crm.tag_2'" in str(refused.value)
    assert "REPAIR_OPENED" not in types(wal, saga.saga_id)
    # Refused, the claim is let go: the daemon may unwind it (and does, undoing what it can).
    report = RecoveryDaemon(wal, clock=LATER).sweep()
    assert report.recovered == [saga.saga_id] and report.compensated == 2


async def test_a_saga_whose_owner_writes_after_open_is_not_resumed(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    # Its owner was only stalled: it wakes up and starts another step.
    wal.barrier(wal.append("STEP_INTENT", saga_id, {"tool": "crm.welcome", "semantics": "IRREVERSIBLE"}, 4))
    with pytest.raises(RepairRefused, match="changed since this session opened"):
        await session.resume(world.onboard, wal=wal)
    assert "REPAIR_RESUMED" not in types(wal, saga_id) and not world.undone("crm.set_address")
    session.abandon(reason="the owner is alive")
    assert types(wal, saga_id)[-1] == "REPAIR_ABANDONED"


@pytest.mark.parametrize("blank", ["", "   ", "\u200b", "\ufeff \u2060", None])
async def test_blank_operator_or_reason_is_refused(wal: FileWAL, blank: Any) -> None:
    saga_id = await dead_onboarding(wal)
    with pytest.raises(ConfigurationError, match="operator= is required and must not be blank"):
        RepairSession.open(wal, saga_id, signer=signer(), operator=blank, reason=WHY, clock=LATER)
    with pytest.raises(ConfigurationError, match="reason= is required and must not be blank"):
        RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=blank, clock=LATER)
    with pytest.raises(ConfigurationError, match=r"operator= 'ops\\u200b@x' contains invisible"):
        RepairSession.open(wal, saga_id, signer=signer(), operator="ops\u200b@x", reason=WHY, clock=LATER)
    session = RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with pytest.raises(ConfigurationError, match="reason= is required"):
        session.abandon(reason=blank)
    session.close()


async def test_records_as_the_seed_passes_them_repair_the_default_log(
    wal: FileWAL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    saga_id = await dead_onboarding(wal)
    records = list(wal.records())
    # Bare records do not say which log they came from: without wal= it is the default log, which
    # must hold the saga (here another, empty log: refused, naming it).
    monkeypatch.setenv("AGENT_SAGA_WAL", str(tmp_path / "elsewhere.wal"))
    FileWAL(tmp_path / "elsewhere.wal").close()
    with pytest.raises(RepairRefused, match=f"no saga {saga_id} in .*elsewhere.wal"):
        RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    # No default log at all (the seed's form, run where the saga's log is not the default one):
    # the line says the records were the question and wal= the answer, not just "no log at".
    monkeypatch.setenv("AGENT_SAGA_WAL", str(tmp_path / "absent.wal"))
    with pytest.raises(RepairRefused, match=r"records do not say which log they came from, and the default log "
                                            r".*absent\.wal .*does not exist: pass wal= the log they were read from"):
        RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    monkeypatch.setenv("AGENT_SAGA_WAL", str(wal.path))
    with RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER) as session:
        assert "kept (2)" in session.format_text()
        session.abandon(reason="seen")
    assert [r["type"] for r in FileWAL(wal.path).records() if r["type"].startswith("REPAIR_")] == [
        "REPAIR_OPENED", "REPAIR_ABANDONED"]


async def test_resume_takes_the_log_by_its_path_as_every_door_does(wal: FileWAL) -> None:
    # issue 44 §5: wal= takes what --wal-path takes; resume refused the path of the saga's own log.
    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(str(wal.path), saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    session.amend(postcode="SW1A 1AA")
    await session.resume(world.onboard, wal=str(wal.path))
    assert "REPAIR_RESUMED" in types(FileWAL(wal.path), saga_id) and session.continued_as is not None


async def test_bad_input_is_refused_in_one_line(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)
    with pytest.raises(RepairRefused, match="no saga nope in"):
        RepairSession.open(wal, "nope", signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with pytest.raises(TypeError, match=r"records must be a log \(its path, URL or WAL\) or its records"):
        RepairSession.open([1, 2], saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with pytest.raises(RepairRefused, match="no saga nope in the records given"):
        RepairSession.open(list(wal.records()), "nope", signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with pytest.raises(ValueError, match="keeps no recovery state"):
        RepairSession.open(MemoryWAL(), saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with RepairSession.open(list(wal.records()), saga_id, signer=signer(), operator=OPERATOR, reason=WHY, wal=wal,
                            clock=LATER) as session:
        with pytest.raises(ConfigurationError, match="amend with JSON values only"):
            session.amend(postcode=float("nan"))
        with pytest.raises(ConfigurationError, match="the continuation must write to the same log"):
            await session.resume(world.onboard, wal=FileWAL(Path(str(wal.path) + ".other")))
    # Closed without an end: the log still says a session is open; the next one takes it over.
    session = RepairSession.open(wal, saga_id, signer=signer(), operator="second@example.com", reason=WHY, clock=LATER)
    assert re.search(r"takes over an earlier session signed by ops@example\+\S+ whose process is gone",
                     session.format_text())
    session.abandon(reason="done")


async def test_a_quarantined_saga_is_repaired_and_an_abandoned_one_handed_back(wal: FileWAL, tmp_path: Path) -> None:
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0, wal=wal)
    gates = PreFlightGate([], switch=switch)
    ids = []
    for _ in range(2):
        with pytest.raises(SagaQuarantined):
            async with saga_scope(wal, gate=gates, name="onboarding") as saga:
                ids.append(saga.saga_id)
                await world.account_and_charge(saga)
                switch.quarantine(saga.saga_id, reason="odd postcodes", by="soc@example.com")
                await world.address(saga, "acct-ada@example.com", "SW1A1AA")
    kept, dropped = ids
    daemon = RecoveryDaemon(wal, clock=LATER)
    assert set(daemon.sweep().skipped) == {kept, dropped}  # frozen: nobody touches them
    session = RepairSession.open(wal, kept, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    session.amend(postcode="SW1A 1AA")
    assert await session.resume(world.onboard, wal=wal) == "onboarded"
    RepairSession.open(wal, dropped, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER).abandon(reason="give it back")
    report = daemon.sweep()
    assert report.recovered == [dropped] and report.compensated == 2  # both effects of the dropped one
    assert world.undone("stripe.refund") == ["ch-acct-ada@example.com-4200"]  # once, not for the repaired one
    assert verify_records(list(wal.records())).ok


async def test_a_frozen_saga_stops_renewing_its_lease_and_a_resume_hands_it_to_the_daemon(
    wal: FileWAL, tmp_path: Path
) -> None:
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0, wal=wal)
    with pytest.raises(SagaQuarantined):
        async with saga_scope(wal, gate=PreFlightGate([], switch=switch), name="onboarding") as saga:
            await world.account_and_charge(saga)
            assert (wal.path, saga.saga_id) in lease_keeper().held()
            switch.quarantine(saga.saga_id, reason="odd postcodes", by="soc@example.com")
            await world.address(saga, "acct-ada@example.com", "SW1A1AA")
    assert (wal.path, saga.saga_id) not in lease_keeper().held()  # this process takes no more of its steps
    daemon = RecoveryDaemon(wal, clock=LATER)
    assert daemon.sweep().skipped == [saga.saga_id]
    switch.resume(saga_id=saga.saga_id, by="risk@example.com")
    assert daemon.sweep().recovered == [saga.saga_id]
    assert world.undone("stripe.refund") == ["ch-acct-ada@example.com-4200"]


@pytest.mark.slow
async def test_a_saga_killed_mid_run_is_repaired(tmp_path: Path, repair_world: Path) -> None:
    log = tmp_path / "onboarding.wal"
    worker = subprocess.Popen([sys.executable, str(Path(world.__file__)), str(log)], env=dict(os.environ))
    ready = repair_world / "ready"
    try:
        while not ready.exists():
            assert worker.poll() is None, "the worker died before it was ready"
            await asyncio.sleep(0.05)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert worker.returncode == -signal.SIGKILL
    saga_id = ready.read_text()
    session = RepairSession.open(log, saga_id, signer=signer(), operator=OPERATOR, reason="the worker was OOM-killed", clock=LATER)
    await _amend_and_resume(session, log)
    assert world.undone("crm.set_address") == ["acct-ada@example.com"]
    assert not world.undone("stripe.refund")
    assert RecoveryDaemon(log, clock=lambda: time.time() + 3600).sweep().compensated == 0


async def _amend_and_resume(session: RepairSession, log: Path) -> None:
    """The repair of a worker's onboarding: its two steps kept, the operator's postcode, step 3 run."""
    assert [(k.step, k.tool) for k in session.retained] == [(1, "crm.create_account"), (2, "stripe.charge")]
    session.amend(postcode="SW1A 1AA")
    wal = FileWAL(log)
    try:
        assert await session.resume(world.onboard, wal=wal) == "onboarded"
    finally:
        wal.close()


@pytest.mark.slow
async def test_a_quarantined_saga_is_repaired_while_its_process_lives_on(tmp_path: Path, repair_world: Path) -> None:
    """Quarantine stops the lease's renewal: the process need not die for an operator to repair its saga."""
    log = tmp_path / "onboarding.wal"
    env = dict(os.environ, AGENT_SAGA_LEASE_TTL="0.5")
    worker = subprocess.Popen([sys.executable, str(Path(world.__file__)), str(log), str(tmp_path / "switch.json")],
                              env=env)
    ready = repair_world / "ready"
    try:
        while not ready.exists():
            assert worker.poll() is None, "the worker died before it was ready"
            await asyncio.sleep(0.05)
        saga_id = ready.read_text()
        deadline = time.monotonic() + 30  # a ceiling for a loaded machine; it takes one ttl
        while blockers := RepairSession.plan(log, saga_id, lease_grace=0.0).blockers:
            assert [b.split(":")[0] for b in blockers] == ["the saga is live"]  # renewed, it stays so
            assert time.monotonic() < deadline, f"still refused after 30 s: {blockers}"
            await asyncio.sleep(0.1)
        session = RepairSession.open(log, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, lease_grace=0.0)
        assert worker.poll() is None  # repaired while its owner still runs
        await _amend_and_resume(session, log)
    finally:
        worker.kill()
        worker.wait()
    assert [e["op"] for e in world.entries() if e["ev"] == "applied"] == [
        "crm.create_account", "stripe.charge", "crm.set_address",
    ]  # nothing undone, nothing twice


# -- agent-saga repair -------------------------------------------------------------------


@pytest.fixture
def gone(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A dead onboarding saga in a file log, its (short) lease no longer renewed and run out."""
    keeper = lease_keeper()
    old = keeper.ttl
    configure_leases(0.05)
    try:
        path = tmp_path / "onboarding.wal"
        wal = FileWAL(path)
        saga_id = asyncio.run(dead_onboarding(wal))
        wal.close()
        keeper.abandon(path, saga_id)  # the process "died": nobody renews its lease
        time.sleep(0.1)  # past the lease, counted from the saga's last record as the daemon does
        yield path, saga_id
    finally:
        configure_leases(old)


def _repair(capsys: pytest.CaptureFixture[str], log: Path, *words: str) -> tuple[int, str, str]:
    code = main(["repair", *words, "--lease-grace", "0", "--wal-path", str(log)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_the_plan_and_records_nothing(gone: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    log, saga_id = gone
    before = log.read_bytes()
    code, out, _ = _repair(capsys, log, saga_id[:8], "--operator", OPERATOR, "--reason", WHY)
    assert code == 0
    assert f"repair of saga {saga_id} (onboarding)" in out and "blockers: none" in out
    assert "step 2 stripe.charge [COMPENSABLE] undo: stripe.refund(charge_id='ch-acct-ada@example.com-4200')" in out
    assert log.read_bytes() == before


def test_cli_resumes_with_amendments(
    gone: tuple[Path, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log, saga_id = gone
    (tmp_path / "myrepairs.py").write_text("from repair_world import onboard\n")
    code, out, err = _repair(capsys, log, saga_id, "--operator", OPERATOR, "--reason", WHY,
                             "--amend", "postcode=SW1A 1AA", "--amend", "attempt:=2", "--resume", "myrepairs:onboard")
    assert (code, err) == (0, "")
    assert "postcode: 'SW1A1AA' -> 'SW1A 1AA'" in out and "attempt: None -> 2" in out
    assert "resumed as saga " in out and out.rstrip().endswith(": 'onboarded'")
    assert world.undone("crm.set_address") == ["acct-ada@example.com"]
    amended = [r["body"] for r in read_records(log) if r["type"] == "REPAIR_AMENDED"]
    assert [(a["field"], a["new"]) for a in amended] == [("postcode", "SW1A 1AA"), ("attempt", 2)]


def test_cli_abandon_hands_the_saga_back(gone: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    log, saga_id = gone
    code, out, _ = _repair(capsys, log, saga_id, "--operator", OPERATOR, "--reason", "customer cancelled",
                           "--abandon")
    assert code == 0 and "handed back" in out
    assert RecoveryDaemon(log, lease_grace=0).sweep().recovered == [saga_id]
    assert world.undone("stripe.refund") == ["ch-acct-ada@example.com-4200"]


def test_cli_signs_the_repair_and_opens_none_without_a_trusted_key(
    gone: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log, saga_id = gone
    key = str(signer())
    monkeypatch.delenv("AGENT_SAGA_OPERATOR_KEY")
    words = (saga_id, "--operator", OPERATOR, "--reason", WHY, "--abandon")
    code, _, err = _repair(capsys, log, *words)
    assert code == 2 and "--operator-key FILE" in err and len(err.strip().splitlines()) == 1
    code, _, err = _repair(capsys, log, *words, "--operator-key", str(untrusted_operator_key(tmp_path)))
    assert code == 2 and "is not trusted on this host" in err
    assert not [r for r in read_records(log) if r["type"].startswith("REPAIR_")]
    assert _repair(capsys, log, *words, "--operator-key", key)[0] == 0
    opened, abandoned = (r for r in read_records(log) if r["type"].startswith("REPAIR_"))
    assert opened["body"]["signature"]["key"].startswith("ops@example+")
    assert abandoned["body"]["session"] == opened["body"]["session"]


@pytest.mark.parametrize(("words", "code", "message"), [
    (["--operator", " ", "--reason", WHY, "--abandon"], 2, "operator= is required and must not be blank"),
    (["--operator", OPERATOR, "--reason", WHY, "--amend", "postcode", "--resume", "x:y"], 2,
     "--amend 'postcode': give FIELD=VALUE"),
    (["--operator", OPERATOR, "--reason", WHY, "--amend", "n:=nope", "--resume", "x:y"], 2, "is not JSON"),
    (["--operator", OPERATOR, "--reason", WHY, "--resume", "nosuchmodule_xyz:f"], 2, "cannot load it"),
    (["--operator", OPERATOR, "--reason", WHY, "--resume", "json"], 2, "give MODULE:FUNC"),
    (["--operator", OPERATOR, "--reason", WHY, "--resume", "json:dumps"], 2, "is not an async function"),
    (["--operator", OPERATOR, "--reason", WHY, "--amend", "a=b"], 2, "--amend goes with --resume"),
])
def test_cli_bad_input_is_one_line(
    gone: tuple[Path, str], capsys: pytest.CaptureFixture[str], words: list[str], code: int, message: str
) -> None:
    log, saga_id = gone
    got, _, err = _repair(capsys, log, saga_id, *words)
    assert got == code and message in err and err.count("\n") == 1, err
    assert "REPAIR_OPENED" not in [r["type"] for r in read_records(log)]


def test_cli_refusal_is_a_finding(gone: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    log, saga_id = gone
    with RepairSession.open(log, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, lease_grace=0):
        code, _, err = _repair(capsys, log, saga_id, "--operator", "b@example.com", "--reason", WHY, "--abandon")
    assert code == 1 and "is being repaired or recovered by another process" in err
    missing = log.with_name("missing.wal")
    code, _, err = _repair(capsys, missing, "x", "--operator", OPERATOR, "--reason", WHY)
    assert code == 3 and f"no log at {missing}" in err and not missing.exists()


# -- the pictures: graph, viz and the flight recorder draw the repair ------------------------


async def test_graph_viz_and_ui_draw_the_repair_inert(wal: FileWAL) -> None:
    from test_ui_server import api, serving

    from agent_saga.ui import FileSource, reconstruct, to_dot, to_mermaid

    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    session.amend(postcode="SW1A 1AA", note="sly\x1b[2J\u202e")
    await session.resume(world.onboard, wal=wal)
    new_id = session.continued_as
    assert new_id is not None
    wal.barrier()
    old, new = reconstruct(wal.records())
    assert [v.type for v in old.verdicts] == ["REPAIR_OPENED", "REPAIR_AMENDED", "REPAIR_AMENDED", "REPAIR_RESUMED"]
    assert old.verdicts[0].label == f"REPAIR opened by {OPERATOR}: {WHY} (keeps step(s) 1, 2)"
    assert old.verdicts[1].label == "repair amended postcode: 'SW1A1AA' -> 'SW1A 1AA'"
    assert old.verdict == f"REPAIRED - continued as saga {new_id[:8]}"
    assert new.saga_id == new_id and new.status == "completed"
    assert [(s.index, s.tool) for s in new.steps] == [
        (1, "crm.create_account"), (2, "stripe.charge"), (3, "crm.set_address")]
    assert new.verdicts[0].label == f"continues saga {saga_id} (repair by {OPERATOR}): holds its kept step(s)"
    for picture in (to_mermaid([old, new]), to_dot([old, new])):
        assert "REPAIR opened by ops@example.com" in picture and "continues saga" in picture
        assert "\x1b" not in picture and "\u202e" not in picture
    with serving(FileSource(wal.path)) as server:
        runs = api(server, "api/runs")["runs"]
        detail = api(server, f"api/runs/{saga_id}")
    assert {run["id"] for run in runs} == {saga_id, new_id}
    labels = [v["label"] for v in detail["verdicts"]]
    assert labels[2] == "repair amended note: (none) -> 'sly\\x1b[2J\\u202e'"
    assert [r["brief"] for r in detail["records"] if r["type"].startswith("REPAIR_")] == labels


# -- the refusal rule, over any mix of steps --------------------------------------------------

_KINDS = st.tuples(
    st.sampled_from(["COMPENSABLE", "IRREVERSIBLE", "REVERSIBLE"]),
    st.sampled_from(["registry", "closure", "none"]),
    st.sampled_from(["committed", "compensated", "not-applied"]),
)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(_KINDS, max_size=8))
def test_open_refuses_exactly_the_compensable_steps_no_other_process_could_undo(
    steps: list[tuple[str, str, str]],
) -> None:
    records: list[dict[str, Any]] = [{"type": "SAGA_STARTED", "saga": "s", "body": {"name": "n"}}]
    for index, (semantics, undo, state) in enumerate(steps, start=1):
        comp = {"registry": {"handler": "stripe.refund", "kwargs": {"charge_id": "c"}, "key": f"k{index}",
                             "recoverable": True},
                "closure": {"handler": None, "kwargs": None, "description": "in memory", "recoverable": False},
                "none": None}[undo]
        records.append({"type": "STEP_INTENT", "saga": "s", "step": index,
                        "body": {"tool": f"t{index}", "semantics": semantics, "op": f"op{index}"}})
        if state == "not-applied":
            records.append({"type": "STEP_NOT_APPLIED", "saga": "s", "step": index, "body": {"error": "no"}})
            continue
        records.append({"type": "STEP_COMMITTED", "saga": "s", "step": index, "body": {"compensation": comp}})
        if state == "compensated":
            records.append({"type": "STEP_COMPENSATED", "saga": "s", "step": index, "body": {}})
    the_plan = plan_of(fold(records)["s"], "here", live_until=None, now=0.0)
    standing = [(i, s) for i, s in enumerate(steps, start=1) if s[2] == "committed"]
    offending = [i for i, (sem, undo, _) in standing if sem == "COMPENSABLE" and undo != "registry"]
    assert [int(b.split()[1]) for b in the_plan.blockers] == offending
    assert all(f"'t{i}' is COMPENSABLE but" in b for i, b in zip(offending, the_plan.blockers, strict=True))
    assert [k.step for k in the_plan.retained] == [i for i, _ in standing if i not in offending]
    # What is kept is undone by a registered handler, or has nothing left to undo (an IRREVERSIBLE
    # or REVERSIBLE step whose undo, if any, was in the dead process's memory).
    for kept in the_plan.retained:
        assert (kept.compensation is None) == (steps[kept.step - 1][1] != "registry")
        assert kept.compensation is None or kept.compensation["key"] == f"k{kept.step}"
