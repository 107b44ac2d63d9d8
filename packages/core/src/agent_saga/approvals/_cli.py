"""``agent-saga approvals list | approve | deny | break-glass | keygen | trust | serve | trust-passkey``.

The requests live in ``--store``: a directory or a ``redis://`` URL (default
``$AGENT_SAGA_APPROVALS``, else ``$AGENT_SAGA_HOME/approvals``, else
``~/.agent-saga/approvals``). A decision goes into the store, signed with the
approver's key (``--key``, default ``$AGENT_SAGA_APPROVER_KEY``, else
``$AGENT_SAGA_HOME/approver.key``, else ``~/.agent-saga/approver.key``), where the
waiting saga sees it on its next poll; with ``--wal-path`` (default
``$AGENT_SAGA_WAL``) it is also written to that log here and now. One-time setup:
``keygen`` makes an approver's key, ``trust`` (as root, on each agent host) adds
its public half to ``/etc/agent-saga/approver-keys``. ``serve`` shows the pending requests
in a browser, where a person registers a passkey and approves or denies one exact action with it;
``trust-passkey`` (as root) adds a registered passkey to ``/etc/agent-saga/approver-passkeys``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_group, add_log_option, add_verb, open_log_to_write
from agent_saga.inert import inert, inert_value
from agent_saga.log.resolve import chosen_log

__all__ = ["register"]

_STORE_HELP = (
    "where the requests live: a directory or a redis:// URL (default: $AGENT_SAGA_APPROVALS, "
    "else $AGENT_SAGA_HOME/approvals, else ~/.agent-saga/approvals)"
)
_EXAMPLES = (
    "examples:\n"
    "  agent-saga approvals list\n"
    "  agent-saga approvals approve af83c011 --approver risk@corp --note 'verified by phone'\n"
    "  agent-saga approvals deny af83c011 --approver risk@corp --note 'not a customer we know'\n"
    "  agent-saga approvals break-glass af83c011 --approver cto@corp --note 'payroll deadline, approver unreachable'\n"
    "  agent-saga approvals keygen --approver risk@corp      # once per approver\n"
    "  sudo agent-saga approvals trust 'risk@corp+1a2b3c4d+AQ...'  # once per agent host"
)


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help=_STORE_HELP)


def register(verbs: Any) -> None:
    actions = add_group(
        verbs, "approvals", "action",
        about="Requests an ApprovalGateway is waiting on. A decision lands in the store, where the "
        "waiting saga observes it; every decision names its approver, and a grant counts only if it is "
        "signed with a key the agent's host trusts.",
        examples=_EXAMPLES + "\n\nexit codes: 0 ok; 1 something is pending (list) or the request could not be "
        "decided (already decided, expired); 2 usage (no --approver, no signing key, unknown id); 3 the store "
        "(or the trusted key list) could not be used",
    )

    listing = add_verb(
        actions, "list", _run_list, help="show waiting requests (exit 1 if any)",
        about=(
            "Show each pending request: tool, rule and reason, id, the action digest an approver's "
            "signature covers, the step's arguments, and, marked (unsigned), what the store alone says (age, "
            "expiry, who was asked). Every character that could act on a terminal is shown escaped (\\x1b, \\u202e)."
        ),
        examples="example:\n  agent-saga approvals list --store redis://approvals.internal:6379/0",
    )
    listing.add_argument("--all", action="store_true", help="include decided and expired requests")
    _store_arg(listing)

    for name, verdict, text in (
        ("approve", "approve", "let the step run"),
        ("deny", "deny", "refuse the step"),
        ("break-glass", "break-glass", "emergency grant, recorded apart and flagged for review"),
    ):
        p = actions.add_parser(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. ID is the id shown by 'approvals list' (a unique prefix "
            "is enough). --approver is required: the log must name who decided.",
            epilog=f"example:\n  agent-saga approvals {name} af83c011 --approver risk@corp --note 'verified by phone'",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("request", metavar="ID", help="the request id, or a unique prefix of it")
        p.add_argument("--approver", default=None, help="who decides (recorded in the store and the log)")
        p.add_argument("--note", default="", help="why (recorded; required for break-glass)")
        p.add_argument("--key", default=None, help="the approver's signing key (default: $AGENT_SAGA_APPROVER_KEY, "
                       "else $AGENT_SAGA_HOME/approver.key, else ~/.agent-saga/approver.key); a grant needs one")
        _store_arg(p)
        add_log_option(p, "also write the decision to this log now",
                       default="$AGENT_SAGA_WAL; without either, the waiting agent writes it into its own "
                       "log when it sees it")
        p.set_defaults(run=_run_decide, verdict=verdict)

    keygen = add_verb(
        actions, "keygen", _run_keygen, help="make an approver's signing key (once per approver)",
        about=(
            "Write a new Ed25519 signing key, readable by you alone (0600), and print its public key "
            "for root to trust on each agent host. Keep it away from the agent's user: whoever can read it can "
            "approve. Never overwrites a key."
        ),
        examples="example:\n  agent-saga approvals keygen --approver risk@corp",
    )
    keygen.add_argument("--approver", required=True, help="the key's name: your approver handle (no spaces)")
    keygen.add_argument("--key", default=None, help="where to write it (default: as for approve --key)")

    trust = add_verb(
        actions, "trust", _run_trust, help="trust an approver's public key on this host (as root)",
        about=(
            "Add a public key (as printed by keygen) to the host's trusted approver keys, "
            "/etc/agent-saga/approver-keys: gateways on this host then act on grants it signs. Remove its line "
            "from the file to revoke it."
        ),
        examples="example:\n  sudo agent-saga approvals trust 'risk@corp+1a2b3c4d+AQ...'",
    )
    trust.add_argument("public_key", metavar="KEY", help="<name>+<id>+<base64>, as keygen printed it")
    trust.add_argument("--trusted-keys", default=None, help="the key list (default: /etc/agent-saga/approver-keys)")

    serve = add_verb(
        actions, "serve", _run_serve, help="approve or deny pending requests in a browser with a passkey (127.0.0.1)",
        about=(
            "Serve a page that lists the pending requests and, for one, the exact action (tool, every "
            "argument as inert text, the action digest), and approves it with a passkey (WebAuthn; the challenge "
            "is the action digest) or denies it with one, with an optional note (the denial's own digest). It registers passkeys too. Binds 127.0.0.1 only; open it as http://localhost:PORT "
            "(WebAuthn needs a secure context). Needs pip install 'agent-saga[passkey]>=3.0.0'."
        ),
        examples=(
            "examples:\n  agent-saga approvals serve --port 8765\n"
            "  ssh -L 8765:127.0.0.1:8765 agent-host   # then open http://localhost:8765 on your machine"
        ),
    )
    _store_arg(serve)
    serve.add_argument("--port", type=int, default=8765, help="port (default: %(default)s; 0 picks a free one)")
    serve.add_argument("--rp-id", default="localhost", help="the WebAuthn relying party id (default: %(default)s)")
    serve.add_argument("--origin", default=None, help="the page's origin as the browser sees it "
                       "(default: http://<rp-id>:<port>), e.g. https://approvals.corp behind a TLS proxy")
    serve.add_argument("--passkeys", default=None, help="the registered passkeys (default: "
                       "/etc/agent-saga/approver-passkeys)")
    serve.add_argument("--enroll", action="store_true", help="append each verified registration to --passkeys, "
                       "only from the URL it prints (it carries a per-run enrolment token) "
                       "(run by its owner, root, while setting up); without it the page prints the trust-passkey "
                       "command")

    trust_pk = add_verb(
        actions, "trust-passkey", _run_trust_passkey, help="register a passkey on this host (as root)",
        about=(
            "Add a passkey line (as 'approvals serve' printed it) to the host's registered passkeys, "
            "/etc/agent-saga/approver-passkeys: gateways on this host then accept grants it makes. Remove its "
            "line to revoke it."
        ),
        examples="example:\n  sudo agent-saga approvals trust-passkey '{\"algorithm\":-7,...}'",
    )
    trust_pk.add_argument("line", metavar="LINE", help="the registered passkey, one JSON line")
    trust_pk.add_argument("--passkeys", default=None, help="the list (default: /etc/agent-saga/approver-passkeys)")


def _open_store(args: argparse.Namespace) -> Any:
    from agent_saga.approvals import open_store
    from agent_saga.errors import ConfigurationError

    try:
        return open_store(args.store)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _run_list(args: argparse.Namespace) -> int:
    from agent_saga.approvals import Status
    from agent_saga.approvals._authority import action_digest
    from agent_saga.approvals._entry import short_ids
    from agent_saga.approvals._passkey import passkey_digest
    from agent_saga.gate import StoreUnavailable

    store = _open_store(args)
    try:
        entries = store.entries()
    except StoreUnavailable as err:
        raise CliError(f"could not read the approval store: {err}", EXIT_UNCHECKED) from None
    now = time.time()
    shown = short_ids([e.id for e in entries])
    pending = [e for e in entries if not e.decided and now < e.deadline]
    listed = sorted(entries if args.all else pending, key=lambda e: e.created_at)
    print(f"approvals: {inert(store.location)} ({len(pending)} pending)")
    # Every field below comes from the store, which the agent can write: each one passes through
    # inert(), so a control sequence in an argument shows as text instead of rewriting the screen.
    for e in listed:
        status = e.status.value if e.decided or now < e.deadline else "EXPIRED"
        reason = inert(e.reason)
        signed, reason_signed = ("", True) if not e.granted else _authenticity(e)
        if e.status is Status.DENIED and e.passkey is not None:
            signed = " (passkey denial: the waiting gateway checks the assertion; final only if it verifies)"
        if not reason_signed:
            reason += " (unsigned)"
        print(f"  [{status}] {inert(e.tool)} -- {reason} (rule {inert(e.rule)}, id {inert(shown[e.id])})")
        if e.passkey_required:
            # The digest the page shows and the passkey signs: one digest wherever this request is shown.
            print(f"        needs a passkey (approve on the page `agent-saga approvals serve` opens): signs action "
                  f"sha256:{passkey_digest(e, e.deadline)} = saga {inert(e.saga_id)}, step {e.step}, the tool, "
                  "the arguments below, the rule and the deadline")
        else:
            print(f"        signs action sha256:{action_digest(e)} = saga {inert(e.saga_id)}, step {e.step} "
                  f"({inert(e.semantics)}), the line above, the arguments below")
        if e.decided:
            who = inert(e.approver or "agent-saga") + signed
            print(f"        {who}: {inert(e.note)}" if e.note else f"        {who}")
            print(f"        (unsigned) requested {_age(now - e.created_at)} ago")
        else:
            asked = [t for i in sorted(e.notified) if i < len(e.levels) for t in e.levels[i][0]]
            print(f"        (unsigned) requested {_age(now - e.created_at)} ago; expires in {_age(e.deadline - now)}; "
                  f"asked: {inert(', '.join(asked)) or 'nobody yet'}")
        for k in sorted(e.args):
            print(f"        {inert(k)}: {inert_value(e.args[k])}")
    return EXIT_FINDING if pending else EXIT_OK


def _authenticity(entry: Any) -> tuple[str, bool]:
    """How a gateway on this host would take a grant (signed by a trusted key, or denied), and
    whether that signature covers the reason (one made before the action digest does not)."""
    from agent_saga.approvals import ApprovalNotAuthenticated, TrustedKeys
    from agent_saga.errors import ConfigurationError

    if entry.passkey is not None:
        # Its challenge is the gateway's own digest of the action: only the gateway can check it.
        return " (passkey grant: the waiting gateway checks the assertion against its own copy)", False
    try:
        signer, covers_reason = TrustedKeys.load().check(entry, entry)
    except (ApprovalNotAuthenticated, ConfigurationError) as err:
        return f" (NOT AUTHENTICATED, a gateway here denies it: {inert(err)})", False
    return f" (signed by {inert(signer)})", covers_reason


def _run_decide(args: argparse.Namespace) -> int:
    from agent_saga.approvals import ApprovalNotFound, ApprovalNotPending, SigningKey, decide
    from agent_saga.approvals._authority import action_digest, approver_name
    from agent_saga.approvals._errors import ApprovalNeedsPasskey
    from agent_saga.errors import ConfigurationError, WALError
    from agent_saga.gate import StoreUnavailable

    try:
        approver = approver_name(args.approver)
        if args.verdict == "break-glass" and not args.note.strip():
            raise ConfigurationError("break-glass needs --note saying why the normal approval could not wait")
    except ConfigurationError as err:
        raise CliError(f"refused: {err}", EXIT_USAGE) from None
    # A denial needs no key (it can only stop the step), but is signed when there is one. A key
    # that cannot be loaded is reported once the request is known: one that needs a passkey is
    # refused for that, whatever the key.
    key: SigningKey | None = None
    no_key: ConfigurationError | None = None
    try:
        key = SigningKey.load(args.key) if args.verdict != "deny" or _key_exists(args.key) else None
    except ConfigurationError as err:
        if args.verdict == "deny":
            raise CliError(f"refused: {err}", EXIT_USAGE) from None
        no_key = err
    store = _open_store(args)
    wal = None
    # Only a log someone chose: unlike the reading verbs, never ./agent-saga.wal by default.
    path = args.wal_path or chosen_log()
    if path:
        wal = open_log_to_write(path)
    try:
        entry = decide(store, args.request, args.verdict, approver=approver, note=args.note, key=key, wal=wal,
                       via="cli")
    except ApprovalNotFound as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except ApprovalNotPending as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except ApprovalNeedsPasskey as err:
        raise CliError(f"refused: {err}", EXIT_USAGE) from None
    except ConfigurationError as err:
        raise CliError(f"refused: {no_key}" if no_key is not None else str(err), EXIT_USAGE) from None
    except StoreUnavailable as err:
        raise CliError(f"could not use the approval store: {err}", EXIT_UNCHECKED) from None
    except WALError as err:
        raise CliError(f"decided in the store, but the log could not be written: {err}", EXIT_UNCHECKED) from None
    finally:
        if wal is not None:
            wal.close()
    done = {"approve": "approved", "deny": "denied", "break-glass": "granted by BREAK-GLASS (flagged for review)"}
    where = f"; logged to {wal.location}" if wal is not None else ""
    signed = f", signed by {key.key_id}" if key is not None else ""
    print(f"{done[args.verdict]}: {inert(entry.tool)} (saga {inert(entry.saga_id)}, step {entry.step}, "
          f"id {inert(entry.id[:8])}) by {inert(entry.approver)}{signed}{where}")
    if key is not None:
        print(f"signed action sha256:{action_digest(entry)}")
    return EXIT_OK


def _key_exists(path: str | None) -> bool:
    from agent_saga.approvals._authority import default_key_path

    return (Path(path) if path else default_key_path()).exists()


def _run_keygen(args: argparse.Namespace) -> int:
    from agent_saga.approvals import SigningKey
    from agent_saga.errors import ConfigurationError

    try:
        key = SigningKey.generate(args.approver)
        written = key.save(args.key)
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    print(f"wrote the signing key of {key.name} to {written} (mode 600: readable by you alone; "
          "never by the agent's user)")
    print(f"its public key: {key.public}")
    print(f"trust it on each agent host, as root: agent-saga approvals trust '{key.public}'")
    return EXIT_OK


@contextmanager
def _changing(path: Path) -> Iterator[None]:
    """A change to one of the host's lists (trusted keys, passkeys): a bad line is a usage error,
    a file that cannot be changed exit 3 (it is root's)."""
    from agent_saga.errors import ConfigurationError

    try:
        yield
    except ConfigurationError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except OSError as err:
        raise CliError(f"cannot change {path}: {err.strerror or err} (run it as root)", EXIT_UNCHECKED) from None


def _run_trust(args: argparse.Namespace) -> int:
    from agent_saga.approvals import trust_key
    from agent_saga.approvals._authority import default_trust_path

    path = Path(args.trusted_keys) if args.trusted_keys else default_trust_path()
    with _changing(path):
        added = trust_key(args.public_key, path)
    name = "+".join(args.public_key.strip().split("+", 2)[:2])
    print(f"{'trusted' if added else 'already trusted'}: {name} ({path}); gateways on this host act on grants it signs")
    return EXIT_OK


def _run_serve(args: argparse.Namespace) -> int:
    from agent_saga.cli.serve import serve_until_stopped
    from agent_saga.errors import ConfigurationError
    from agent_saga.ui._approvals_page import make_approvals_server

    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port} is not a port number (0..65535)", EXIT_USAGE)
    store = _open_store(args)
    try:
        server = make_approvals_server(store, port=args.port, passkeys=args.passkeys, rp_id=args.rp_id,
                                       origin=args.origin, enroll=args.enroll)
    except (ValueError, ConfigurationError) as err:
        raise CliError(str(err), EXIT_USAGE) from None
    with server:
        print(f"agent-saga approvals: {inert(store.location)} at {server.url}  (Ctrl+C stops it)", flush=True)
        serve_until_stopped(server)
    return EXIT_OK


def _run_trust_passkey(args: argparse.Namespace) -> int:
    from agent_saga.approvals import PasskeyCredential, trust_passkey
    from agent_saga.approvals._passkey import default_passkeys_path

    path = Path(args.passkeys) if args.passkeys else default_passkeys_path()
    with _changing(path):
        credential = PasskeyCredential.from_line(args.line.strip(), "LINE")
        added = trust_passkey(args.line, path)
    print(f"{'registered' if added else 'already registered'}: the passkey {inert(credential.credential_id[:16])} "
          f"of {inert(credential.approver)} ({path}); gateways on this host accept grants it makes")
    return EXIT_OK
