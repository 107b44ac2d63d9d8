"""`approvals serve`'s HTTP surface: loopback only, its own Host and Origin, a strict CSP, inert data."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from soft_authenticator import SoftAuthenticator

from agent_saga import ConfigurationError, FileApprovalStore
from agent_saga.approvals import (
    ApprovalEntry,
    Status,
    passkey_challenge,
    passkey_denial_challenge,
    trust_passkey,
)
from agent_saga.approvals._entry import new_entry
from agent_saga.approvals._passkey import passkey_digest
from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalRequest
from agent_saga.semantics import ActionSemantics
from agent_saga.ui._approvals_page import ApprovalsServer, make_approvals_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ApprovalsServer]:
    s = make_approvals_server(FileApprovalStore(tmp_path / "approvals"), port=0)
    s.serve_in_thread()
    yield s
    s.shutdown()
    s.server_close()


def call(server: ApprovalsServer, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    sent = {"Host": f"localhost:{server.server_address[1]}", **(headers or {})}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=sent)
    response = conn.getresponse()
    out = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    conn.close()
    return out


def test_only_loopback_is_served(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"refusing to serve approvals on 0\.0\.0\.0"):
        make_approvals_server(FileApprovalStore(tmp_path), host="0.0.0.0", port=0)


def test_it_does_not_start_on_a_passkey_list_others_may_write(tmp_path: Path) -> None:
    listed = tmp_path / "approver-passkeys"
    listed.write_text("")
    listed.chmod(0o666)
    with pytest.raises(ConfigurationError, match="writable by group or others"):
        make_approvals_server(FileApprovalStore(tmp_path / "approvals"), port=0, passkeys=listed)


def test_a_foreign_host_header_is_refused(server: ApprovalsServer) -> None:
    # DNS rebinding: a page elsewhere reaching this port under its own name.
    status, _, _ = call(server, "GET", "/api/requests", headers={"Host": "evil.example:80"})
    assert status == 421


def test_every_page_forbids_inline_script_and_framing(server: ApprovalsServer) -> None:
    for path in ("/", "/approvals.js", "/api/requests"):
        status, headers, _ = call(server, "GET", path)
        assert status == 200
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe" not in csp and "frame-ancestors 'none'" in csp
    _, _, page = call(server, "GET", "/")
    assert b"<script>" not in page and b"onclick" not in page


def test_a_post_from_another_origin_or_not_json_is_refused(server: ApprovalsServer) -> None:
    body = {"approver": "risk@corp"}
    assert call(server, "POST", "/api/register/options", body)[0] == 403  # no Origin
    assert call(server, "POST", "/api/register/options", body, {"Origin": "http://evil.example"})[0] == 403
    assert call(server, "POST", "/api/register/options", body,
                {"Origin": server.origin, "Content-Type": "text/plain"})[0] == 415
    status, _, options = call(server, "POST", "/api/register/options", body, {"Origin": server.origin})
    assert status == 200
    created = json.loads(options)["options"]
    # UV required; only Ed25519 (-8) and ES256 (-7) offered.
    assert created["authenticatorSelection"]["userVerification"] == "required"
    assert sorted(p["alg"] for p in created["pubKeyCredParams"]) == [-8, -7]


def test_the_action_is_served_inert_with_the_digest_the_passkey_signs(server: ApprovalsServer) -> None:
    step = StepRequest("saga-1", 1, "refund\x1b[2K", ActionSemantics.IRREVERSIBLE,
                       {"memo": "pay \u202eevil", "amount": 100}, frozenset())
    asked = new_entry(ApprovalRequest(step, "refunds", "r"), 4_000_000_000.0, 60.0, ((("@o",), 0.0),))
    server.store.create(asked)
    _, _, listing = call(server, "GET", "/api/requests")
    assert json.loads(listing)["pending"][0]["tool"] == "refund\\x1b[2K"
    status, _, raw = call(server, "GET", f"/api/requests/{asked.id}")
    assert status == 200 and b"\x1b" not in raw and "\u202e".encode() not in raw
    action = json.loads(raw)
    assert action["args"] == [["amount", "100"], ["memo", "pay \\u202eevil"]]
    assert action["digest"] == passkey_digest(asked, asked.deadline)
    status, _, options = call(server, "POST", f"/api/requests/{asked.id}/options", {"digest": action["digest"]},
                              {"Origin": server.origin})
    requested = json.loads(options)
    assert status == 200 and requested["userVerification"] == "required"
    assert base64.urlsafe_b64decode(requested["challenge"] + "==").hex() == action["digest"]


@pytest.mark.slow
def test_the_cli_serves_the_page_and_stops_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "agent_saga", "approvals", "serve", "--port", "0",
                             "--store", str(tmp_path / "approvals")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("agent-saga approvals: ") and " at http://localhost:" in first, first
        url = first.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as page:  # Host: localhost:<port>, its own
            assert b"Approve with passkey" in page.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_an_enrolling_server_takes_a_registration_only_with_its_token(tmp_path: Path) -> None:
    # Any local process can reach a loopback port and send any Origin: without the token the
    # printed URL carries, it must not get a passkey of its own into the host's list.
    s = make_approvals_server(FileApprovalStore(tmp_path / "approvals"), port=0, enroll=True)
    s.serve_in_thread()
    try:
        assert s.enroll_token and s.url.endswith(f"#enroll={s.enroll_token}")
        for token in (None, "guess", s.enroll_token[:-1]):
            status, _, body = call(s, "POST", "/api/register", {"approver": "agent", "credential": {},
                                                                "enroll_token": token}, {"Origin": s.origin})
            assert status == 400 and b"enrolment token" in body
    finally:
        s.shutdown()
        s.server_close()


def pending_refund(server: ApprovalsServer, amount: int) -> tuple[ApprovalEntry, SoftAuthenticator]:
    """A refund of ``amount`` waiting in the server's store, and a registered authenticator to decide it."""
    step = StepRequest("saga-1", 1, "refund", ActionSemantics.IRREVERSIBLE, {"amount": amount}, frozenset())
    asked = new_entry(ApprovalRequest(step, "refunds", "r"), 4_000_000_000.0, 60.0, ((("@o",), 0.0),))
    server.store.create(asked)
    authenticator = SoftAuthenticator(origin=server.origin)
    trust_passkey(authenticator.registered().to_line())
    return asked, authenticator


def test_a_denial_is_signed_over_its_own_digest_with_a_bounded_note(server: ApprovalsServer) -> None:
    asked, authenticator = pending_refund(server, 100)
    origin = {"Origin": server.origin}
    note = "wrong account"
    shown = passkey_digest(asked, asked.deadline)
    status, _, options = call(server, "POST", f"/api/requests/{asked.id}/deny-options",
                              {"note": note, "digest": shown}, origin)
    challenge = base64.urlsafe_b64decode(json.loads(options)["challenge"] + "==")
    assert status == 200 and challenge == passkey_denial_challenge(asked, asked.deadline, note)
    # A note past the bound: one line saying what to do, and nothing decided.
    status, _, body = call(server, "POST", f"/api/requests/{asked.id}/deny",
                           {"note": "x" * 501, "credential": {}, "digest": shown}, origin)
    assert status == 400 and b"at most 500 characters" in body
    # An approval's assertion posted as a denial is refused here already; the request stays pending.
    grant = authenticator.assertion(passkey_challenge(asked, asked.deadline))
    status, _, body = call(server, "POST", f"/api/requests/{asked.id}/deny",
                           {"note": "", "credential": grant, "digest": shown}, origin)
    assert status == 403 and b"not made to deny" in body
    assert server.store.get(asked.id).status is Status.PENDING  # type: ignore[union-attr]
    denial = authenticator.assertion(challenge)
    status, _, body = call(server, "POST", f"/api/requests/{asked.id}/deny",
                           {"note": note, "credential": denial, "digest": shown}, origin)
    assert status == 200 and json.loads(body)["approver"] == "risk@corp"
    stored = server.store.get(asked.id)
    assert stored is not None and stored.status is Status.DENIED and stored.note == note
    assert stored.passkey == denial


def test_an_action_changed_after_the_page_showed_it_is_refused_with_409(server: ApprovalsServer) -> None:
    """The digest the page showed comes with every passkey request; another digest is a 409, never a challenge."""
    asked, authenticator = pending_refund(server, 5)
    origin = {"Origin": server.origin}
    shown = json.loads(call(server, "GET", f"/api/requests/{asked.id}")[2])["digest"]
    for kind in ("options", "deny-options"):
        status, _, body = call(server, "POST", f"/api/requests/{asked.id}/{kind}", {}, origin)
        assert status == 400 and b"send the digest the page showed" in body
    # The agent edits its entry after the page loaded: the digest shown is no longer the entry's.
    server.store.update(asked.id, lambda e: e.replace(args={"amount": 5000}))
    for kind in ("options", "deny-options"):
        status, _, body = call(server, "POST", f"/api/requests/{asked.id}/{kind}", {"digest": shown}, origin)
        assert status == 409 and b"changed while you were reading: look again" in body and b"challenge" not in body
    # An assertion the agent made the person sign for 5000 (say, through an old page) is refused too.
    now = passkey_digest(server.store.get(asked.id), asked.deadline)  # type: ignore[arg-type]
    edited = authenticator.assertion(bytes.fromhex(now))
    status, _, body = call(server, "POST", f"/api/requests/{asked.id}/approve",
                           {"credential": edited, "digest": shown}, origin)
    assert status == 409 and b"changed while you were reading" in body
    assert server.store.get(asked.id).status is Status.PENDING  # type: ignore[union-attr]
    # Looked at again, the new digest is asked to sign exactly what is shown.
    status, _, options = call(server, "POST", f"/api/requests/{asked.id}/options", {"digest": now}, origin)
    assert status == 200 and base64.urlsafe_b64decode(json.loads(options)["challenge"] + "==").hex() == now
