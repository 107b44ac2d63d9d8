"""`approvals serve` in Debian's headless Chromium, with a CDP virtual authenticator.

The authenticator is Chrome's own (WebAuthn.addVirtualAuthenticator, CTAP2, user verification
on), the page is the one a person opens, the agent is a saga in this process whose only step is
an IRREVERSIBLE refund behind a PreFlightGate with a passkey-requiring ApprovalGateway. A person
registers, approves the exact action, and the step runs once; a changed amount, a replayed
assertion and another request's assertion are refused, and each refusal is in the log. A person
who denies with the passkey (and a note) refuses the step for good, and the log says who.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import chromium  # first: without Playwright it says how to get it
from playwright.sync_api import Browser, Page, Route

from agent_saga import (
    ApprovalGateway,
    ApprovalPolicy,
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    saga_scope,
)
from agent_saga.approvals import ApprovalEntry, Notification, PasskeyCredentials, Status
from agent_saga.ui._approvals_page import ApprovalsServer, make_approvals_server

pytestmark = pytest.mark.slow
BIDI = "refund \u202eevil\u202c memo\x1b[2K"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


class Quiet:
    def notify(self, notification: Notification) -> None:
        pass


class Agent:
    """A saga on a thread: one refund, behind a gate whose approvals need a passkey."""

    def __init__(self, world: World, saga: str, amount: int, wal: FileWAL | None = None) -> None:
        self.world, self.saga, self.amount = world, saga, amount
        self.wal = wal or world.wal
        self.outcome: str | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        gate = PreFlightGate(approval_provider=ApprovalGateway(
            store=self.world.store, notifier=Quiet(), wal=self.wal,
            policy=ApprovalPolicy(timeout=120, poll_interval=0.05, require_passkey=True)))

        def refund() -> str:
            with self.world.effects.open("a", encoding="utf-8") as out:
                out.write(f"{self.saga} refund {self.amount}\n")
            return "refunded"

        try:
            with saga_scope(self.wal, gate=gate, saga_id=self.saga) as saga:
                saga.execute(tool="refund", semantics="IRREVERSIBLE", forward=refund,
                             args={"amount": self.amount, "to": "acct_9", "memo": BIDI})
            self.outcome = "ran"
        except SagaAborted as err:
            self.outcome, self.error = "refused", err

    def finish(self) -> str | None:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the agent still waits"
        return self.outcome


class World:
    def __init__(self, tmp: Path, page: Page, server: ApprovalsServer) -> None:
        self.tmp, self.page, self.server = tmp, page, server
        self.store: FileApprovalStore = server.store  # type: ignore[assignment]
        self.wal = FileWAL(tmp / "agent.wal")
        self.effects = tmp / "effects.txt"
        # The page without the enrolment token (server.url carries it, for registering).
        self.page_url = server.origin + "/"

    def effects_of(self, saga: str) -> int:
        text = self.effects.read_text(encoding="utf-8") if self.effects.exists() else ""
        return sum(1 for line in text.splitlines() if line.startswith(f"{saga} "))

    def pending(self, saga: str) -> ApprovalEntry:
        def found() -> ApprovalEntry | None:
            return next((e for e in self.store.entries() if e.saga_id == saga and not e.decided), None)
        return wait_for(found, f"the request of {saga}")

    def register(self, approver: str = "risk@corp", algorithm: int | None = None) -> None:
        if algorithm is not None:
            # Chrome's authenticator takes the first algorithm offered (Ed25519 here): offer only
            # ``algorithm`` by editing the options on their way to the page; the server still checks.
            def only(route: Route) -> None:
                issued = route.fetch().json()
                issued["options"]["pubKeyCredParams"] = [{"type": "public-key", "alg": algorithm}]
                route.fulfill(json=issued)

            self.page.route("**/api/register/options", only)
        self.page.goto(self.server.url)
        self.page.fill("#approver", approver)
        self.page.click("#register")
        self.page.wait_for_selector("#enrol:not([hidden]), #error:not([hidden])")
        error = self.page.locator("#error")
        assert error.is_hidden(), error.inner_text()
        assert "registered on this host" in self.page.inner_text("#enrol")

    def approve(self, saga: str) -> str:
        """Open the page, pick ``saga``'s request, approve it with the passkey; the page's status line."""
        self.page.goto(self.page_url)
        self.page.click(f"#pending button:has-text('saga {saga},')")
        self.page.wait_for_selector("#action:not([hidden])")
        self.page.click("#approve")
        # A selector, not wait_for_function: the page's CSP forbids the eval that would need.
        self.page.wait_for_selector("#status:not(:empty), #error:not([hidden])")
        error = self.page.locator("#error")
        assert error.is_hidden(), error.inner_text()
        return self.page.inner_text("#status")

    def deny(self, saga: str, note: str) -> str:
        """Open the page, pick ``saga``'s request, deny it with the passkey and ``note``; the status line."""
        self.page.goto(self.page_url)
        self.page.click(f"#pending button:has-text('saga {saga},')")
        self.page.wait_for_selector("#action:not([hidden])")
        self.page.fill("#deny-note", note)
        self.page.click("#deny")
        self.page.wait_for_selector("#status:not(:empty), #error:not([hidden])")
        error = self.page.locator("#error")
        assert error.is_hidden(), error.inner_text()
        return self.page.inner_text("#status")

    def records(self, rtype: str, saga: str, wal: FileWAL | None = None) -> list[dict[str, Any]]:
        return [r["body"] for r in (wal or self.wal).records() if r["type"] == rtype and r["saga"] == saga]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until ``condition()`` is truthy; fail naming ``what`` (a bound on a hang, not a timing claim)."""
    import time

    end = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)
    return value


@pytest.fixture
def world(browser: Browser, tmp_path: Path) -> Iterator[World]:
    server = make_approvals_server(FileApprovalStore(tmp_path / "approvals"), port=0, enroll=True)
    server.serve_in_thread()
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"uncaught: {exc}"))
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
        "isUserVerified": True, "automaticPresenceSimulation": True}})
    w = World(tmp_path, page, server)
    try:
        yield w
    finally:
        context.close()
        server.shutdown()
        server.server_close()
        w.wal.close()
    assert not problems, problems


@pytest.mark.parametrize("algorithm", [-8, -7], ids=["Ed25519", "ES256"])
def test_register_approve_the_exact_action_and_the_step_runs_once(world: World, algorithm: int) -> None:
    world.register(algorithm=algorithm)
    (registered,) = PasskeyCredentials.load().credentials.values()
    assert registered.approver == "risk@corp" and registered.algorithm == algorithm
    agent = Agent(world, "saga-ok", 120)
    entry = world.pending("saga-ok")
    page = world.page
    page.goto(world.page_url)
    page.click("#pending button:has-text('saga saga-ok,')")
    page.wait_for_selector("#action:not([hidden])")
    # The exact action, as text: the bidi override and the escape sequence show as escapes.
    cells = page.locator("#a-args td").all_inner_texts()
    assert cells == ["amount", "120", "memo", "refund \\u202eevil\\u202c memo\\x1b[2K", "to", "acct_9"]
    (asked,) = world.records("APPROVAL_REQUESTED", "saga-ok")
    # The digest shown is the challenge the gateway recorded before anyone was asked.
    assert page.inner_text("#a-digest") == "sha256:" + asked["passkey"]["challenge"]
    assert "approved by risk@corp" in world.approve("saga-ok")
    assert agent.finish() == "ran"
    assert world.effects_of("saga-ok") == 1
    (granted,) = world.records("APPROVAL_GRANTED", "saga-ok")
    assert granted["approver"] == "risk@corp" and granted["passkey"]["user_verified"] is True
    assert granted["passkey"]["credential_id"] == registered.credential_id
    assert granted["passkey"]["algorithm"] == {-8: "Ed25519", -7: "ES256"}[algorithm]
    assert granted["passkey"]["challenge"] == asked["passkey"]["challenge"]
    # Chrome's virtual authenticator counts: the assertion's count moved past the registered one.
    assert granted["passkey"]["sign_count"] > registered.sign_count
    assert world.store.get(entry.id).status is Status.GRANTED  # type: ignore[union-attr]


def test_a_changed_amount_is_refused(world: World) -> None:
    world.register()
    agent = Agent(world, "saga-amount", 5000)
    entry = world.pending("saga-amount")
    # The agent rewrites what the person will see: 5 instead of the 5000 the step sends.
    world.store.update(entry.id, lambda e: e.replace(args={**e.args, "amount": 5}))
    assert "approved by risk@corp" in world.approve("saga-amount")  # the page saw a consistent (edited) entry
    assert agent.finish() == "refused"
    assert "not authenticated" in str(agent.error)
    assert world.effects_of("saga-amount") == 0
    (denied,) = world.records("APPROVAL_DENIED", "saga-amount")
    assert denied["approver"] is None and "another action" in denied["note"]
    assert not world.records("APPROVAL_GRANTED", "saga-amount")


def test_another_requests_assertion_and_a_replayed_one_are_refused(world: World) -> None:
    world.register()
    first = Agent(world, "saga-a", 100)
    world.pending("saga-a")
    world.approve("saga-a")
    assert first.finish() == "ran"
    (granted_a,) = [e for e in world.store.entries() if e.saga_id == "saga-a"]
    assertion = granted_a.passkey
    assert assertion is not None

    # Another request: the agent copies saga-a's grant, assertion and all, into saga-b's entry.
    second = Agent(world, "saga-b", 100)
    entry_b = world.pending("saga-b")
    world.store.update(entry_b.id, lambda e: e.replace(
        status=Status.GRANTED, approver="risk@corp", decided_at=granted_a.decided_at, decided_via="passkey",
        passkey=assertion))
    assert second.finish() == "refused"
    (denied_b,) = world.records("APPROVAL_DENIED", "saga-b")
    # Refused before its challenge is even checked: this log holds it as saga-a's.
    assert f"already accepted for request {granted_a.id[:8]} (a replay)" in denied_b["note"]

    # A replay: saga-a again, under a fresh log, finds its old grant in the store and presents it.
    fresh = FileWAL(world.tmp / "fresh.wal")
    try:
        again = Agent(world, "saga-a", 100, wal=fresh)
        assert again.finish() == "refused"
        (denied_again,) = world.records("APPROVAL_DENIED", "saga-a", fresh)
        assert "another action" in denied_again["note"]
        assert not world.records("APPROVAL_GRANTED", "saga-a", fresh)
    finally:
        fresh.close()
    assert world.effects_of("saga-a") == 1 and world.effects_of("saga-b") == 0


def test_deny_with_passkey_refuses_the_step_and_the_log_says_who(world: World) -> None:
    world.register()
    (registered,) = PasskeyCredentials.load().credentials.values()
    agent = Agent(world, "saga-no", 900)
    entry = world.pending("saga-no")
    note = "wrong account \u202eevil\u202c"
    status = world.deny("saga-no", note)
    # The note comes back as text, its bidi controls as visible escapes.
    assert "denied by risk@corp" in status and "wrong account \\u202eevil\\u202c" in status
    assert agent.finish() == "refused"
    assert world.effects_of("saga-no") == 0  # the tool body never ran
    (denied,) = world.records("APPROVAL_DENIED", "saga-no")
    assert denied["approver"] == "risk@corp" and denied["note"] == note
    assert denied["passkey"]["credential_id"] == registered.credential_id
    assert denied["passkey"]["user_verified"] is True and denied["passkey"]["sign_count"] > registered.sign_count
    (asked,) = world.records("APPROVAL_REQUESTED", "saga-no")
    # Signed over the denial's own digest, never the grant's the request recorded.
    assert denied["passkey"]["challenge"] != asked["passkey"]["challenge"]
    assert not world.records("APPROVAL_GRANTED", "saga-no")
    stored = world.store.get(entry.id)
    assert stored is not None and stored.status is Status.DENIED


def test_an_action_changed_while_the_person_reads_is_refused_not_signed(world: World) -> None:
    """The agent shows the person amount 5, then puts back the 5000 its step sends before the click.

    The page sends the digest it showed; the server refuses (409, "changed while you were
    reading") instead of asking the passkey to sign the store's action of the moment.
    """
    world.register()
    agent = Agent(world, "saga-swap", 5000)
    entry = world.pending("saga-swap")
    world.store.update(entry.id, lambda e: e.replace(args={**e.args, "amount": 5}))
    page = world.page
    page.goto(world.page_url)
    page.click("#pending button:has-text('saga saga-swap,')")
    page.wait_for_selector("#action:not([hidden])")
    assert page.locator("#a-args td").all_inner_texts()[:2] == ["amount", "5"]
    shown = page.inner_text("#a-digest")
    # The page is loaded and read; the agent puts back the amount its step will send.
    world.store.update(entry.id, lambda e: e.replace(args={**e.args, "amount": 5000}))
    answers: list[int] = []
    page.on("response", lambda r: answers.append(r.status) if "/api/requests/" in r.url else None)
    page.click("#approve")
    page.wait_for_selector("#status:not(:empty), #error:not([hidden])")
    assert page.locator("#error").is_visible(), f"signed and {page.inner_text('#status')}"
    assert "changed while you were reading: look again" in page.inner_text("#error")
    assert 409 in answers
    # The page shows the action again, as it is now: the amount the step sends, another digest.
    assert page.locator("#a-args td").all_inner_texts()[:2] == ["amount", "5000"]
    assert page.inner_text("#a-digest") != shown
    stored = world.store.get(entry.id)
    assert stored is not None and stored.status is Status.PENDING and stored.passkey is None
    # Having looked again, the person denies it.
    assert "denied by risk@corp" in world.deny("saga-swap", "not 5000")
    assert agent.finish() == "refused"
    assert world.effects_of("saga-swap") == 0
    assert not world.records("APPROVAL_GRANTED", "saga-swap")


def test_a_registration_asked_for_under_the_same_name_does_not_void_the_first(world: World) -> None:
    """Any local process can ask for registration options under a person's name, with the page's Origin.

    Between the person's options and their answer, a process asks under ``risk@corp`` too; the
    person's registration still completes, since each challenge is held under the page's own session.
    """
    import http.client
    import json

    intruded: list[int] = []

    def intrude(route: Route) -> None:
        port = world.server.server_address[1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/api/register/options", body=json.dumps({"approver": "risk@corp"}),
                     headers={"Host": f"localhost:{port}", "Origin": world.server.origin,
                              "Content-Type": "application/json"})
        intruded.append(conn.getresponse().status)
        conn.close()
        route.continue_()

    world.page.route("**/api/register", intrude)
    world.register()
    assert intruded == [200]
    (registered,) = PasskeyCredentials.load().credentials.values()
    assert registered.approver == "risk@corp"
