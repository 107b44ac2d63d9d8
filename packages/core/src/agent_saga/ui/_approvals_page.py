"""``agent-saga approvals serve``: pending approvals in a browser, approved or denied with a passkey.

The page lists the pending requests of an approval store and, for one, the exact action: the
tool, every argument as inert text (control and bidi characters arrive as visible escapes,
:func:`agent_saga.inert.inert_json`), the rule, the deadline and the passkey challenge
(:func:`agent_saga.approvals._passkey.passkey_digest`), which is the digest the browser asks the
authenticator to sign to approve. *Deny with passkey* asks it to sign the denial's own challenge
(:func:`agent_saga.approvals.passkey_denial_challenge`: the same action, "deny", and the
person's note, bounded to ``DENIAL_NOTE_MAX`` characters and shown back only as text). It
registers passkeys too: a verified registration is printed as a line for root to add to the
host's list (``agent-saga approvals trust-passkey``), or appended to it directly when the server
was started with ``enroll=True`` (root, setting up the host) -- then only a registration that
carries the server's per-run enrolment token (printed in the URL it shows, ``#enroll=<token>``, to
whoever started it): any local process can reach a loopback port and set any ``Origin`` header,
and must not be able to add a passkey of its own.

The store is the agent's to write, also while a person reads the page: every options, approve
and deny request carries the digest the page showed, and the server answers 409 ("changed while
you were reading: look again") when the entry's digest is another, so the authenticator is only
ever asked to sign an action the person saw (the challenge is that digest). A registration's
challenge is held under a random session the page receives with its options, never under the
approver's name, which any local process can ask for too.

Safe by default, as ``agent-saga ui``: it binds 127.0.0.1, refuses any other address, answers
only requests whose ``Host`` is its own, sends a strict CSP (script from this server only, no
inline script, no framing), and takes a POST only from its own origin with a JSON body. This
server checks an assertion before it writes the decision into the store, to tell the person at
once; the gateway checks it again against its own copy of the request, which is what counts.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import threading
import time
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent_saga.approvals import (
    ApprovalEntry,
    ApprovalError,
    ApprovalNotAuthenticated,
    ApprovalNotPending,
    ApprovalStore,
    PasskeyCredentials,
    Status,
    find,
    passkey_challenge,
    passkey_denial_challenge,
    trust_passkey,
)
from agent_saga.approvals._authority import approver_name
from agent_saga.approvals._evidence import iso
from agent_saga.approvals._passkey import (
    DENIAL_NOTE_MAX,
    assertion_options,
    default_passkeys_path,
    passkey_digest,
    registration_options,
    require_webauthn,
    verify_assertion,
    verify_registration,
)
from agent_saga.errors import ConfigurationError
from agent_saga.gate import StoreUnavailable
from agent_saga.inert import inert_json
from agent_saga.ui._debugger import PageHandler, is_loopback

__all__ = ["ApprovalsServer", "make_approvals_server"]

_STATIC = {
    "/": ("approvals.html", "text/html; charset=utf-8"),
    "/approvals.js": ("approvals.js", "text/javascript; charset=utf-8"),
    "/approvals.css": ("approvals.css", "text/css; charset=utf-8"),
}
_MAX_BODY = 64 * 1024
_CHALLENGE_TTL = 300.0
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")


class ChangedWhileReading(ApprovalError):
    """The entry's action is not the one the page showed: the agent (or anyone) changed it since."""


class ApprovalsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: ApprovalStore, passkeys: Path, rp_id: str,
                 origin: str | None, enroll: bool) -> None:
        self.store = store
        self.passkeys = passkeys
        self.rp_id = rp_id
        self.enroll = enroll
        #: Required with every enrolling registration; shown only to whoever started the server.
        self.enroll_token = secrets.token_urlsafe(24) if enroll else None
        self._static: dict[str, bytes] = {}
        #: Registrations under way, by the random session each page was given: approver, challenge, until.
        self._registrations: dict[str, tuple[str, bytes, float]] = {}
        self._lock = threading.Lock()
        super().__init__(address, _Handler)
        host, port = str(self.server_address[0]), int(self.server_address[1])
        self.host = host
        # WebAuthn needs a secure context: http://localhost is one, http://127.0.0.1 is not everywhere.
        self.origin = origin or f"http://{rp_id}:{port}"
        self.url = f"{self.origin}/" + (f"#enroll={self.enroll_token}" if self.enroll_token else "")
        self.hosts = {f"{host}:{port}", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}",
                      urlsplit(self.origin).netloc}

    def static(self, name: str) -> bytes:
        if name not in self._static:
            self._static[name] = resources.files("agent_saga.ui").joinpath("static", name).read_bytes()
        return self._static[name]

    def registered(self) -> PasskeyCredentials:
        return PasskeyCredentials.load(self.passkeys)

    def new_registration(self, approver: str) -> tuple[str, bytes]:
        """A registration for ``approver``: its session (the page keeps it) and its challenge.

        Held under the session, never the name: another request under the same name (any
        local process can send one) is another registration and leaves this one alone.
        """
        session, challenge = secrets.token_urlsafe(24), secrets.token_bytes(32)
        now = time.monotonic()
        with self._lock:
            for stale in [k for k, (_, _, until) in self._registrations.items() if until < now]:
                del self._registrations[stale]
            self._registrations[session] = (approver, challenge, now + _CHALLENGE_TTL)
        return session, challenge

    def take_registration(self, session: object) -> tuple[str, bytes]:
        """The approver and challenge of the registration ``session``, once: a second use finds none."""
        with self._lock:
            approver, challenge, until = self._registrations.pop(session, ("", b"", 0.0)) \
                if isinstance(session, str) else ("", b"", 0.0)
        if not challenge or time.monotonic() > until:
            raise ConfigurationError("no registration under way for this page (or it timed out): register again")
        return approver, challenge

    def serve_in_thread(self) -> threading.Thread:
        """Serve on a daemon thread (for tests and embedding); stop with ``shutdown()``."""
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                  name="agent-saga-approvals", daemon=True)
        thread.start()
        return thread


def make_approvals_server(
    store: ApprovalStore, host: str = "127.0.0.1", port: int = 8765, *, passkeys: str | Path | None = None,
    rp_id: str = "localhost", origin: str | None = None, enroll: bool = False,
) -> ApprovalsServer:
    """A server for ``store`` on ``host:port`` (port 0: any free port). Not yet serving.

    ``passkeys``: the registered passkey list (default: the host's); ``rp_id`` and ``origin``:
    the WebAuthn relying party (default ``localhost`` and ``http://localhost:<port>``); ``enroll``:
    append a verified registration to ``passkeys`` (its owner's job, usually root's).
    ValueError for a non-loopback ``host``; ConfigurationError without the ``passkey`` extra.
    """
    require_webauthn()
    if not is_loopback(host):
        raise ValueError(
            f"refusing to serve approvals on {host}: anyone who could reach it could read every pending "
            "action. Bind 127.0.0.1 (the default) and reach it through an SSH tunnel or a TLS proxy (--origin)"
        )
    if not rp_id or "/" in rp_id or ":" in rp_id:
        raise ValueError(f"--rp-id {rp_id!r} must be a domain name such as localhost or approvals.example.com")
    path = Path(passkeys) if passkeys is not None else default_passkeys_path()
    PasskeyCredentials.load(path)  # a list that is refused fails here, before anyone opens the page
    return ApprovalsServer((host, port), store, path, rp_id, origin, enroll)


def _pending(entry: ApprovalEntry, now: float) -> bool:
    return not entry.decided and now < entry.deadline


def _summary(entry: ApprovalEntry) -> dict[str, Any]:
    return {"id": entry.id, "tool": entry.tool, "rule": entry.rule, "reason": entry.reason,
            "saga": entry.saga_id, "step": entry.step, "expires_at": iso(entry.deadline)}


def _action(entry: ApprovalEntry) -> dict[str, Any]:
    return {
        **_summary(entry), "semantics": entry.semantics, "status": entry.status.value,
        "deadline": entry.deadline,
        # A list, in key order: the page shows each argument as one line of text.
        "args": [[k, json.dumps(entry.args[k], ensure_ascii=False, sort_keys=True)
                  if not isinstance(entry.args[k], str) else entry.args[k]] for k in sorted(entry.args)],
        "digest": passkey_digest(entry, entry.deadline),
    }


class _Handler(PageHandler):
    server: ApprovalsServer
    server_version = "agent-saga-approvals"

    def _json(self, status: HTTPStatus, value: Any) -> None:
        # Every string inert: the store is the agent's to write, the page shows what arrives as text.
        self._send(status, inert_json(value).encode(), "application/json; charset=utf-8")

    def _raw_json(self, text: str) -> None:
        # WebAuthn options: built here from ids and digests, never from agent-written text.
        self._send(HTTPStatus.OK, text.encode(), "application/json; charset=utf-8")

    def _host_ok(self) -> bool:
        if self.headers.get("Host") not in self.server.hosts:
            self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "unexpected Host header"})
            return False
        return True

    def do_HEAD(self) -> None:  # noqa: N802 - http.server calls it by this name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - likewise
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if path in _STATIC:
            name, ctype = _STATIC[path]
            self._send(HTTPStatus.OK, self.server.static(name), ctype)
            return
        try:
            if path == "/api/requests":
                now = time.time()
                entries = sorted((e for e in self.server.store.entries() if _pending(e, now)),
                                 key=lambda e: e.created_at)
                self._json(HTTPStatus.OK, {"store": self.server.store.location,
                                           "pending": [_summary(e) for e in entries]})
                return
            parts = path.split("/")
            if len(parts) == 4 and parts[:3] == ["", "api", "requests"]:
                self._json(HTTPStatus.OK, _action(find(self.server.store, parts[3])))
                return
        except ApprovalError as err:
            self._json(HTTPStatus.NOT_FOUND, {"error": str(err)})
            return
        except StoreUnavailable as err:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"cannot read the approval store: {err}"})
            return
        self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {path}"})

    def _body(self) -> dict[str, Any] | None:
        # Only this page may post: a form elsewhere cannot send JSON with our Origin.
        if self.headers.get("Origin") != self.server.origin:
            self._json(HTTPStatus.FORBIDDEN, {"error": "requests must come from this page's own origin"})
            return None
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            self._json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, {"error": "send application/json"})
            return None
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= _MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"the body must be 1..{_MAX_BODY} bytes of JSON"})
            return None
        try:
            data = json.loads(self.rfile.read(length))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "the body must be a JSON object"})
            return None
        return data

    def do_POST(self) -> None:  # noqa: N802 - likewise
        if not self._host_ok():
            return
        data = self._body()
        if data is None:
            return
        path = urlsplit(self.path).path
        parts = path.split("/")
        try:
            if path == "/api/register/options":
                approver = approver_name(data.get("approver"))
                session, challenge = self.server.new_registration(approver)
                options = registration_options(approver, self.server.rp_id, challenge)
                self._raw_json(f'{{"session": {json.dumps(session)}, "options": {options}}}')
            elif path == "/api/register":
                self._register(data)
            elif len(parts) == 5 and parts[:3] == ["", "api", "requests"] and parts[4] == "options":
                entry = self._as_shown(parts[3], data)
                self._raw_json(assertion_options(self.server.registered(), passkey_challenge(entry, entry.deadline),
                                                 self.server.rp_id))
            elif len(parts) == 5 and parts[:3] == ["", "api", "requests"] and parts[4] == "deny-options":
                entry = self._as_shown(parts[3], data)
                challenge = passkey_denial_challenge(entry, entry.deadline, _note(data))
                self._raw_json(assertion_options(self.server.registered(), challenge, self.server.rp_id))
            elif len(parts) == 5 and parts[:3] == ["", "api", "requests"] and parts[4] == "approve":
                self._decide(parts[3], data, deny=False)
            elif len(parts) == 5 and parts[:3] == ["", "api", "requests"] and parts[4] == "deny":
                self._decide(parts[3], data, deny=True)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such API path: {path}"})
        except ChangedWhileReading as err:
            self._json(HTTPStatus.CONFLICT, {"error": str(err)})
        except (ConfigurationError, ApprovalError) as err:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except StoreUnavailable as err:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"cannot use the approval store: {err}"})

    def _as_shown(self, ref: str, data: dict[str, Any]) -> ApprovalEntry:
        """The entry ``ref`` as it is now, if its digest is the one the page showed (``data["digest"]``).

        The challenge is built from this entry alone, so it is the digest the person was shown:
        an entry the agent edited after the page loaded is refused, never signed.
        """
        shown = data.get("digest")
        if not isinstance(shown, str) or not _DIGEST.match(shown):
            raise ConfigurationError('send the digest the page showed ("digest": 64 lowercase hex digits): '
                                     "reload the page and open the request again")
        entry = find(self.server.store, ref)
        if not hmac.compare_digest(passkey_digest(entry, entry.deadline), shown):
            raise ChangedWhileReading(f"request {entry.id[:8]} changed while you were reading: look again")
        return entry

    def _register(self, data: dict[str, Any]) -> None:
        credential = data.get("credential")
        if not isinstance(credential, dict):
            raise ConfigurationError("no credential: the browser's navigator.credentials.create() answer is needed")
        server = self.server
        if server.enroll_token is not None:
            given = data.get("enroll_token")
            if not isinstance(given, str) or not hmac.compare_digest(given.encode(), server.enroll_token.encode()):
                raise ConfigurationError("this server enrols passkeys only with its enrolment token: open the URL "
                                         "it printed (…#enroll=<token>)")
        approver, challenge = server.take_registration(data.get("session"))
        registered = verify_registration(credential, approver, challenge, server.rp_id, server.origin)
        line = registered.to_line()
        if server.enroll:
            trust_passkey(line, server.passkeys)
        self._json(HTTPStatus.OK, {
            "approver": approver, "credential_id": registered.credential_id, "enrolled": server.enroll,
            "line": line, "command": f"sudo agent-saga approvals trust-passkey '{line}'",
        })

    def _decide(self, ref: str, data: dict[str, Any], *, deny: bool) -> None:
        """Approve or deny ``ref`` with the assertion in ``data``, checked here first (the gateway checks again)."""
        store = self.server.store
        credential = data.get("credential")
        if not isinstance(credential, dict):
            raise ConfigurationError("no assertion: the browser's navigator.credentials.get() answer is needed")
        note = _note(data) if deny else ""
        entry = self._as_shown(ref, data)
        try:
            check = verify_assertion(self.server.registered(), credential, entry, entry.deadline, deny=deny, note=note)
        except ApprovalNotAuthenticated as err:
            self._json(HTTPStatus.FORBIDDEN, {"error": str(err)})
            return
        now = time.time()
        digest = passkey_digest(entry, entry.deadline)
        verb = "denied" if deny else "approved"

        def change(current: ApprovalEntry) -> ApprovalEntry:
            if current.decided:
                raise ApprovalNotPending(f"request {current.id[:8]} is already {current.status.value}")
            if now >= current.deadline:
                raise ApprovalNotPending(f"request {current.id[:8]} expired at {iso(current.deadline)}")
            if passkey_digest(current, current.deadline) != digest:
                raise ChangedWhileReading(f"request {current.id[:8]} changed while you were reading: look again")
            return current.replace(status=Status.DENIED if deny else Status.GRANTED,
                                   approver=check.credential.approver, decided_at=now, decided_via="passkey",
                                   note=note, signer=None, signature=None, passkey=dict(credential))

        decided = store.update(entry.id, change)
        self._json(HTTPStatus.OK, {verb: decided.id, "approver": decided.approver, "digest": digest,
                                   "note": decided.note, "sign_count": check.sign_count})


def _note(data: dict[str, Any]) -> str:
    """The denial's note as the person typed it (it is signed, so it is not trimmed); bounded."""
    note = data.get("note", "")
    if note is None:
        note = ""
    if not isinstance(note, str) or len(note) > DENIAL_NOTE_MAX:
        raise ConfigurationError(f"the note must be text of at most {DENIAL_NOTE_MAX} characters: shorten it")
    return note
