"""The kill switch: halt, drain, quarantine, resume, TTL, the grace window, the CLI.

Where the switch lives and whom it reaches (other processes, other users): test_gate_switch_host.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gate_support import Approver, Clock, req

from agent_saga import (
    BudgetLimit,
    Compensation,
    ConfigurationError,
    FileWAL,
    KillSwitch,
    MemoryWAL,
    PreFlightGate,
    SagaAborted,
    SagaQuarantined,
    StepRefused,
    saga_scope,
)
from agent_saga.cli.main import main
from agent_saga.gate import FileSwitchStore, MemoryLimitStore, SagaInfo, default_switch, set_switch
from agent_saga.gate._switch import default_switch_path
from agent_saga.log import read_records

pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


@pytest.fixture
def switch(tmp_path: Path) -> KillSwitch:
    return KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0, wal=MemoryWAL())


def refused(switch: KillSwitch, tool: str, tags: tuple[str, ...] = ()) -> bool:
    rules: list[str | None] = []
    try:
        switch.check(req(tool, tags=tags))
    except StepRefused as err:
        rules.append(err.rule)
    assert rules in ([], ["kill-switch"])
    return bool(rules)


def test_halt_scopes_global_tool_prefix_and_tag(switch: KillSwitch) -> None:
    switch.halt("tool:wire.send", reason="fraud pattern", by="soc@corp")
    assert refused(switch, "wire.send")
    assert not refused(switch, "wire.sendx")
    switch.halt("tool:stripe.*", reason="stripe incident", by="soc@corp")
    assert refused(switch, "stripe.charge")
    assert refused(switch, "stripe.refund")
    assert not refused(switch, "stripex")
    switch.halt("tag:eu", reason="eu region", by="soc@corp")
    assert refused(switch, "db.write", tags=("eu", "x"))
    assert not refused(switch, "db.write", tags=("us",))
    assert switch.resume("tool:stripe.*", by="soc@corp") == 1
    assert not refused(switch, "stripe.charge")
    assert refused(switch, "wire.send")
    switch.halt("global", reason="stop everything", by="ciso@corp")
    assert refused(switch, "anything.at.all")
    with pytest.raises(StepRefused, match=r"halted \(global\) by ciso@corp: stop everything"):
        switch.check(req("x"))


def test_every_change_is_logged_with_who_why_and_when(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "ops.wal")
    sw = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), wal=wal)
    sw.halt("tool:wire.send", reason="fraud pattern", by="soc@corp", ttl=600)
    sw.drain(reason="deploying", by="ci@corp", ttl=60)
    sw.quarantine("saga-8f3c", reason="duplicate charges", by="soc@corp")
    sw.resume(saga_id="saga-8f3c", by="risk@corp", reason="checked")
    wal.close()
    records = list(read_records(tmp_path / "ops.wal"))
    assert [(r["type"], r["saga"]) for r in records] == [
        ("SWITCH_HALTED", ""), ("SWITCH_DRAINED", ""), ("SWITCH_QUARANTINED", "saga-8f3c"),
        ("SWITCH_RESUMED", "saga-8f3c"),
    ]
    halted = records[0]["body"]
    assert (halted["by"], halted["reason"], halted["scope"], halted["ttl"]) == (
        "soc@corp", "fraud pattern", "tool:wire.send", 600.0)
    assert halted["expires_at"] - halted["at"] == pytest.approx(600)
    assert records[3]["body"]["by"] == "risk@corp"


def test_a_lever_without_who_or_why_is_refused(switch: KillSwitch) -> None:
    with pytest.raises(ConfigurationError, match="by is required"):
        switch.halt("global", reason="x", by=" ")
    with pytest.raises(ConfigurationError, match="reason is required"):
        switch.quarantine("s", reason="", by="me")
    with pytest.raises(ConfigurationError, match="every halt expires"):
        switch.halt("global", reason="x", by="me", ttl=0)
    with pytest.raises(ConfigurationError, match="unknown halt scope"):
        switch.halt("wire.send", reason="x", by="me")


def test_every_halt_expires_with_its_ttl(tmp_path: Path) -> None:
    wall = Clock(1_000_000.0)
    sw = KillSwitch(FileSwitchStore(tmp_path / "s.json"), poll_interval=0, wall=wall)
    sw.halt("tool:a", reason="r", by="me", ttl=60)
    sw.drain(reason="r", by="me", ttl=30)
    assert refused(sw, "a")
    wall.advance(30)
    sw.admit(SagaInfo("s2", "n"))  # the drain has lifted
    wall.advance(29.9)
    assert refused(sw, "a")
    wall.advance(0.1)
    assert not refused(sw, "a")
    assert not sw.status().active


def test_halt_is_checked_before_limits_and_approvals(switch: KillSwitch) -> None:
    approver = Approver(True)
    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=100, window=60)],
                         approval_provider=approver, switch=switch, store=MemoryLimitStore())
    switch.halt("tool:wire.send", reason="fraud", by="soc")
    for _ in range(3):
        with pytest.raises(StepRefused, match="halted"):
            gate.check(req("wire.send", "IRREVERSIBLE", amount=100))
    assert approver.requests == []  # nobody was woken up
    switch.resume("tool:wire.send", by="soc")
    gate.check(req("wire.send", "IRREVERSIBLE", amount=100))  # and no budget was spent refusing


def test_drain_lets_running_sagas_finish_and_starts_no_new_ones(switch: KillSwitch) -> None:
    set_switch(switch)  # the implicit default gate consults the process-wide switch
    done: list[int] = []
    with saga_scope(MemoryWAL()) as running:
        running.execute(tool="k8s.scale", semantics="REVERSIBLE", forward=lambda: done.append(1))
        switch.drain(reason="deploying", by="ci@corp", ttl=600)
        with pytest.raises(StepRefused, match="draining") as info, saga_scope(MemoryWAL(), name="new"):
            pass
        assert info.value.rule == "drain"
        # The running saga's remaining steps are not blocked: it finishes.
        running.execute(tool="k8s.scale", semantics="COMPENSABLE", forward=lambda: done.append(2),
                        compensate=lambda r: Compensation(fn=lambda: None))
    assert done == [1, 2]
    assert running.saga.status.value == "COMPLETED"
    switch.resume(by="ci@corp", drain=True)
    with saga_scope(MemoryWAL()) as s:
        s.execute(tool="k8s.scale", semantics="REVERSIBLE", forward=lambda: done.append(3))
    assert done == [1, 2, 3]


def test_quarantine_freezes_one_saga_without_rollback(switch: KillSwitch) -> None:
    wal, refunds, other = MemoryWAL(), [], []
    gate = PreFlightGate([], switch=switch)
    scope = saga_scope(wal, gate=gate)
    with pytest.raises(SagaQuarantined, match="quarantined by soc@corp"), scope as s:
        s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                  compensate=lambda r: Compensation(fn=lambda: refunds.append(r["id"])))
        switch.quarantine(s.saga_id, reason="suspected duplicate charges", by="soc@corp")
        with saga_scope(MemoryWAL(), gate=gate) as bystander:  # other sagas carry on
            bystander.execute(tool="stripe.charge", semantics="REVERSIBLE", forward=lambda: other.append(1))
        s.execute(tool="stripe.charge", semantics="REVERSIBLE", forward=lambda: other.append(2))
    assert refunds == []
    assert other == [1]
    assert "ROLLBACK_STARTED" not in [r["type"] for r in wal.records()]
    saga_id = scope.saga.saga_id  # type: ignore[union-attr]
    assert switch.store.is_quarantined(saga_id)
    assert switch.is_quarantined(saga_id)
    assert not switch.is_quarantined("someone-else")
    switch.resume(saga_id=saga_id, by="risk@corp")
    assert not switch.store.is_quarantined(saga_id)


def test_a_store_outage_is_survived_for_the_grace_window_then_fails_closed(tmp_path: Path) -> None:
    clock, path = Clock(), tmp_path / "switch.json"
    sw = KillSwitch(FileSwitchStore(path), grace=30, poll_interval=0, clock=clock)
    sw.halt("tool:wire.send", reason="fraud", by="soc")
    path.unlink()
    path.mkdir()  # the store is now unreadable (not merely empty)
    clock.advance(29)
    assert refused(sw, "wire.send")  # the last known halt still holds: an outage is not a bypass
    sw.check(req("db.read"))  # a blip does not halt everything
    clock.advance(2)
    with pytest.raises(StepRefused, match=r"unreadable for 31\.0s \(grace 30s\)"):
        sw.check(req("db.read"))
    path.rmdir()
    sw.check(req("db.read"))  # readable again (and nothing is halted in it)


def test_grace_zero_fails_closed_at_once_and_an_unread_store_has_no_grace(tmp_path: Path) -> None:
    path = tmp_path / "switch.json"
    path.mkdir()
    with pytest.raises(StepRefused, match="never read"):
        KillSwitch(FileSwitchStore(path), grace=3600, poll_interval=0).check(req("db.read"))
    path.rmdir()
    sw = KillSwitch(FileSwitchStore(path), grace=0, poll_interval=0)
    sw.check(req("db.read"))
    path.write_text("{not json")
    with pytest.raises(StepRefused, match="not a valid switch state"):
        sw.check(req("db.read"))


def test_between_polls_a_step_gets_the_last_answer_read_a_refusal_included(tmp_path: Path) -> None:
    """Each step asks; between two reads the cached answer holds, whichever it was."""
    clock, path = Clock(), tmp_path / "switch.json"
    path.mkdir()  # unreadable from the start
    sw = KillSwitch(FileSwitchStore(path), grace=0, poll_interval=60, clock=clock)
    for _ in range(2):  # the second check is inside the poll window: still refused
        with pytest.raises(StepRefused, match="never read"):
            sw.check(req("db.read"))
    path.rmdir()
    clock.advance(61)
    sw.check(req("db.read"))  # read again: readable and empty
    KillSwitch(FileSwitchStore(path)).halt(reason="incident", by="soc")  # another process's lever
    clock.advance(30)
    sw.check(req("db.read"))  # within the window: the last read (no halt) holds
    clock.advance(31)
    assert refused(sw, "db.read")


def test_a_change_that_keeps_the_files_inode_mtime_and_size_is_still_seen(tmp_path: Path) -> None:
    # A reused inode and a write within one mtime tick look like this to a reader (ext4 reused
    # the freed inode for every rewrite); made certain here by rewriting in place.
    path = tmp_path / "switch.json"
    sw = KillSwitch(FileSwitchStore(path), poll_interval=0)
    sw.halt("tool:pay.aaaa", reason="fraud", by="soc")
    assert refused(sw, "pay.aaaa")
    before = os.stat(path)
    with path.open("r+") as f:
        f.write(path.read_text().replace("pay.aaaa", "pay.bbbb"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert refused(sw, "pay.bbbb")
    sw.check(req("pay.aaaa"))  # no longer halted


def test_the_default_gate_enforces_the_switch_but_no_policy_by_surprise() -> None:
    sent: list[str] = []
    with saga_scope(MemoryWAL()) as s:  # no gate given, nothing configured
        s.execute(tool="email.send", semantics="IRREVERSIBLE", forward=lambda: sent.append("mail"))
    assert sent == ["mail"]  # unlike PreFlightGate(), the implicit gate holds nothing for approval
    assert default_switch().store.location == str(default_switch_path())
    default_switch().halt("tool:email.send", reason="spam wave", by="soc")
    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="email.send", semantics="IRREVERSIBLE", forward=lambda: sent.append("again"))
    assert isinstance(info.value.cause, StepRefused)
    assert sent == ["mail"]


# -- the CLI ------------------------------------------------------------------------------------


def cli(*argv: str) -> int:
    return main(list(argv))


def test_cli_levers_status_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, wal = str(tmp_path / "sw.json"), str(tmp_path / "ops.wal")
    log = FileWAL(wal)
    log.append("SAGA_STARTED", "saga-8f3c", {"name": "n"})  # a saga id is checked against the log
    log.close()
    assert cli("status", "--store", store) == 0
    assert cli("halt", "--scope", "tool:wire.send", "--reason", "fraud pattern", "--by", "soc@corp",
               "--store", store, "--wal-path", wal) == 0
    assert cli("halt", "--drain", "--reason", "deploying", "--by", "ci@corp", "--ttl", "600",
               "--store", store, "--wal-path", wal) == 0
    assert cli("quarantine", "saga-8f3c", "--reason", "dupes", "--by", "soc@corp", "--store", store,
               "--wal-path", wal) == 0
    capsys.readouterr()
    assert cli("status", "--store", store) == 1
    out = capsys.readouterr().out
    assert "[HALT] tool:wire.send by soc@corp" in out
    assert "[DRAIN] by ci@corp" in out
    assert "[QUARANTINE] saga saga-8f3c" in out
    assert cli("resume", "--scope", "tool:wire.send", "--by", "soc@corp", "--store", store, "--wal-path", wal) == 0
    assert cli("resume", "--scope", "tool:wire.send", "--by", "soc@corp", "--store", store, "--wal-path", wal) == 1
    assert cli("resume", "--drain", "--by", "ci@corp", "--store", store, "--wal-path", wal) == 0
    assert cli("resume", "--saga", "saga-8f3c", "--by", "soc@corp", "--store", store, "--wal-path", wal) == 0
    assert cli("status", "--store", store) == 0
    types = [r["type"] for r in read_records(wal)]
    assert types.count("SWITCH_RESUMED") == 3
    assert "SWITCH_QUARANTINED" in types
    capsys.readouterr()
    assert cli("halt", "--scope", "wire.send", "--reason", "x", "--by", "y", "--store", store, "--wal-path", wal) == 2
    assert "unknown halt scope" in capsys.readouterr().err
    assert cli("halt", "--reason", "x", "--by", "y", "--store", store) == 2
    with pytest.raises(SystemExit) as exit_info:
        cli("halt", "--scope", "global", "--reason", "no author")  # --by is required
    assert exit_info.value.code == 2


@pytest.mark.slow
def test_cli_store_unreachable_exits_3_with_a_message_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "switch.json"
    bad.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "agent_saga", "status", "--store", str(bad)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 3
    assert "could not use the switch store" in result.stderr
    assert "Traceback" not in result.stderr
    help_text = subprocess.run([sys.executable, "-m", "agent_saga", "quarantine", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "agent-saga quarantine saga-8f3c --reason" in help_text


def test_set_switch_with_a_file_store_warns_that_it_is_host_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="agent_saga.gate.switch"):
        set_switch(KillSwitch(FileSwitchStore(tmp_path / "s.json")))
    assert "this host only" in caplog.text


async def test_a_global_or_tag_halt_also_refuses_new_sagas(switch: KillSwitch) -> None:
    gate = PreFlightGate([], switch=switch)
    switch.halt("tag:eu", reason="eu incident", by="soc")
    with pytest.raises(StepRefused, match="eu incident"):
        async with saga_scope(MemoryWAL(), gate=gate, tags=["eu"]):
            pass
    async with saga_scope(MemoryWAL(), gate=gate, tags=["us"]) as s:
        await s.execute(tool="db.write", semantics="REVERSIBLE", forward=lambda: 1)
    switch.halt("global", reason="everything stops", by="ciso")
    with pytest.raises(StepRefused, match="everything stops"):
        async with saga_scope(MemoryWAL(), gate=gate):
            pass
