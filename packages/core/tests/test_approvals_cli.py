"""`agent-saga approvals`: what a person sees, and every way a decision is refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from approval_support import trusted_key
from cli_support import Ran, run_cli
from gate_support import req

from agent_saga import FileApprovalStore
from agent_saga.approvals import ApprovalEntry, Status
from agent_saga.approvals._entry import new_entry
from agent_saga.gate import ApprovalRequest
from agent_saga.log import read_records

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process

ACTIONS = ["list", "approve", "deny", "break-glass"]


def cli(*args: str) -> Ran:
    return run_cli("approvals", *args)  # in process (cli_support.py); test_cli.py runs the real one


@pytest.fixture
def store(tmp_path: Path) -> FileApprovalStore:
    return FileApprovalStore(tmp_path / "approvals")


@pytest.fixture(autouse=True)
def key() -> Any:
    """The approver's key at the CLI's default place ($AGENT_SAGA_HOME/approver.key), trusted on this host."""
    signer = trusted_key()
    signer.save()
    return signer


def waiting(store: FileApprovalStore, saga: str = "saga-1", *, age: float = 42.0, timeout: float = 900.0,
            **args: object) -> ApprovalEntry:
    step = req("wire.send", "IRREVERSIBLE", saga=saga, **args)
    entry = new_entry(ApprovalRequest(step, "irreversible", "Action cannot be undone"), time.time() - age, timeout,
                      ((("@oncall",), 0.0),))
    created, _ = store.create(entry.replace(escalated=(0,), notified=(0,)))
    return created


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_has_help_with_an_example(action: str) -> None:
    out = cli(action, "--help")
    assert out.returncode == 0 and "example" in out.stdout and f"agent-saga approvals {action}" in out.stdout


def test_list_shows_what_a_person_needs_to_decide(store: FileApprovalStore) -> None:
    entry = waiting(store, amount=80000, to="acct_9")
    out = cli("list", "--store", str(store.path))
    assert out.returncode == 1  # something is waiting for a human
    lines = out.stdout.splitlines()
    head = next(line for line in lines if "[PENDING]" in line)
    assert head.strip().startswith("[PENDING] wire.send -- Action cannot be undone (rule irreversible, ")
    assert head.endswith(f"id {entry.id[:8]})")
    assert "        amount: 80000" in lines and "        to: acct_9" in lines
    assert "saga saga-1, step 1" in out.stdout
    unsigned = next(line for line in lines if "(unsigned)" in line)  # what the store alone says
    assert "s ago; expires in " in unsigned and "asked: @oncall" in unsigned


def test_list_is_clean_with_nothing_waiting_and_all_shows_decisions(store: FileApprovalStore, key: Any) -> None:
    entry = waiting(store)
    store.update(entry.id, lambda e: key.sign(e.replace(status=Status.GRANTED, approver="risk@corp", note="ok",
                                                        decided_at=time.time())))
    forged = waiting(store, saga="saga-3")
    store.update(forged.id, lambda e: e.replace(status=Status.GRANTED, approver="agent", decided_at=time.time()))
    expired = waiting(store, saga="saga-2", age=1000.0)
    out = cli("list", "--store", str(store.path))
    assert out.returncode == 0 and "(0 pending)" in out.stdout and "wire.send" not in out.stdout
    out = cli("list", "--all", "--store", str(store.path))
    assert "[GRANTED]" in out.stdout and f"risk@corp (signed by {key.key_id}): ok" in out.stdout
    assert "agent (NOT AUTHENTICATED, a gateway here denies it: it carries no signature" in out.stdout
    assert "[EXPIRED] wire.send" in out.stdout and expired.id[:8] in out.stdout


def test_an_approval_without_an_approver_is_refused_and_says_why(store: FileApprovalStore) -> None:
    entry = waiting(store)
    for action in ("approve", "deny", "break-glass"):
        out = cli(action, entry.id[:8], "--note", "n", "--store", str(store.path))
        assert out.returncode == 2
        assert "anonymous approval proves nothing" in out.stderr and "Traceback" not in out.stderr
    assert store.get(entry.id).status is Status.PENDING  # type: ignore[union-attr]


def test_approve_logs_the_approver_note_args_and_time(store: FileApprovalStore, tmp_path: Path) -> None:
    entry = waiting(store, amount=80000)
    wal = tmp_path / "ops.wal"
    out = cli("approve", entry.id[:8] + "...", "--approver", "risk@corp", "--note", "verified by phone",
              "--store", str(store.path), "--wal-path", str(wal))
    assert out.returncode == 0, out.stderr
    assert "approved: wire.send" in out.stdout and "by risk@corp" in out.stdout
    (record,) = list(read_records(wal))
    assert record["type"] == "APPROVAL_GRANTED" and record["saga"] == "saga-1" and record["step"] == 1
    body = record["body"]
    assert (body["approver"], body["note"], body["args"], body["written_by"]) == (
        "risk@corp", "verified by phone", {"amount": 80000}, "cli")
    assert body["decided_at"].endswith("Z")
    decided = store.get(entry.id)
    assert decided is not None and decided.logged == (f"decided@{wal.absolute()}",) and not decided.claims


def test_break_glass_needs_a_note_and_is_recorded_apart(store: FileApprovalStore, tmp_path: Path) -> None:
    entry = waiting(store)
    out = cli("break-glass", entry.id[:8], "--approver", "cto@corp", "--store", str(store.path))
    assert out.returncode == 2 and "--note" in out.stderr
    wal = tmp_path / "ops.wal"
    out = cli("break-glass", entry.id[:8], "--approver", "cto@corp", "--note", "payroll", "--store",
              str(store.path), "--wal-path", str(wal))
    assert out.returncode == 0 and "BREAK-GLASS" in out.stdout
    (record,) = list(read_records(wal))
    assert record["type"] == "APPROVAL_BREAK_GLASS" and record["body"]["requires_review"] is True


def test_a_second_decision_an_unknown_id_and_an_expired_request(store: FileApprovalStore) -> None:
    entry = waiting(store)
    assert cli("deny", entry.id[:8], "--approver", "a@corp", "--store", str(store.path)).returncode == 0
    again = cli("approve", entry.id[:8], "--approver", "b@corp", "--store", str(store.path))
    assert again.returncode == 1 and "already DENIED by a@corp" in again.stderr
    unknown = cli("approve", "0000ffff", "--approver", "b@corp", "--store", str(store.path))
    assert unknown.returncode == 2 and "no approval request starts with '0000ffff'" in unknown.stderr
    late = waiting(store, saga="late", age=1000.0)
    out = cli("approve", late.id[:8], "--approver", "b@corp", "--store", str(store.path))
    assert out.returncode == 1 and "expired" in out.stderr
