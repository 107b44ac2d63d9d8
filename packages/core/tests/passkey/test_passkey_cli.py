"""A request that needs a passkey, met at the terminal: the notice and the CLI name the page (issue 44 §7).

The agent's gateway requires a passkey; the person reads the notice and reaches for
``agent-saga approvals approve`` with their (trusted) signing key. That grant could never count
(the gateway refuses a key-signed grant where a passkey is required), so the CLI refuses it in
one line naming the page, exits non-zero and leaves the request pending; a denial still stops
the step from the terminal.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cli_support import run_cli

from agent_saga import ApprovalGateway, ApprovalPolicy, FileApprovalStore, FileWAL
from agent_saga.approvals import Notification, SigningKey, Status, trust_key
from agent_saga.approvals._passkey import passkey_digest
from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalDecision, ApprovalRequest
from agent_saga.semantics import ActionSemantics


class Told:
    """The notifier the person reads: what it said, and an event when it said it."""

    def __init__(self) -> None:
        self.said: list[Notification] = []
        self.event = threading.Event()

    def notify(self, notification: Notification) -> None:
        self.said.append(notification)
        self.event.set()


def test_the_cli_refuses_to_approve_a_request_that_needs_a_passkey_and_names_the_page(tmp_path: Path) -> None:
    key = SigningKey.generate("risk@corp")
    key.save()
    trust_key(key.public)
    store = FileApprovalStore(tmp_path / "approvals")
    told = Told()
    wal = FileWAL(tmp_path / "agent.wal")
    gateway = ApprovalGateway(store=store, notifier=told, wal=wal,
                              policy=ApprovalPolicy(timeout=600, poll_interval=0.02, require_passkey=True))
    step = StepRequest("saga-1", 1, "refund", ActionSemantics.IRREVERSIBLE, {"amount": 5000}, frozenset())
    answer: list[ApprovalDecision | BaseException] = []

    def agent() -> None:
        try:
            answer.append(gateway.request_approval(ApprovalRequest(step, "refunds", "refunds need a person")))
        except BaseException as err:  # the test reads what the agent was told
            answer.append(err)

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    try:
        assert told.event.wait(60), "the gateway never told anyone"
        (entry,) = store.entries()
        out = run_cli("approvals", "approve", entry.id[:8], "--approver", "risk@corp", "--note", "ok",
                      "--store", str(store.path))
        assert out.returncode != 0 and "approved" not in out.stdout, (out.stdout, out.stderr)
        (line,) = out.stderr.strip().splitlines()
        assert "needs a passkey" in line and "agent-saga approvals serve" in line, line
        # Without a key too: the page is the answer, not keygen.
        keyless = run_cli("approvals", "break-glass", entry.id[:8], "--approver", "risk@corp", "--note", "urgent",
                          "--key", str(tmp_path / "none.key"), "--store", str(store.path))
        assert keyless.returncode == 2 and "needs a passkey" in keyless.stderr, keyless.stderr
        text = told.said[0].text()
        # The notice names the page, and the digest the page shows (the one the passkey signs).
        assert "agent-saga approvals serve" in text and "approvals approve" not in text, text
        assert f"sha256:{passkey_digest(entry, entry.deadline)}" in text, text
        listed = run_cli("approvals", "list", "--store", str(store.path))
        assert f"sha256:{passkey_digest(entry, entry.deadline)}" in listed.stdout, listed.stdout
        stored = store.get(entry.id)
        assert stored is not None and stored.status is Status.PENDING

        # A denial needs no passkey: it can only stop the step.
        denied = run_cli("approvals", "deny", entry.id[:8], "--approver", "risk@corp", "--note", "not now",
                         "--store", str(store.path))
        assert denied.returncode == 0, denied.stderr
        thread.join(60)
        assert not thread.is_alive()
        (decision,) = answer
        assert isinstance(decision, ApprovalDecision) and not decision.approved, decision
    finally:
        if thread.is_alive():  # never leave the agent waiting: deny in the store directly
            store.update(store.entries()[0].id, lambda e: e.replace(status=Status.DENIED, decided_at=time.time()))
            thread.join(60)
        wal.close()
