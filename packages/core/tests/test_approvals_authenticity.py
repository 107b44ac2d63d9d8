"""An approval counts only if a named person decided it through the approvals CLI or API.

The agent can write the store (its own files, or Redis), so a decision is trusted
only with an Ed25519 signature by a key listed in the host's trusted approver keys,
over this very request and its arguments. Everything else an agent could write --
no approver, a blank or invisible one, no signature, a signature by its own key, a
signature over other arguments, an edited decision -- is denied and recorded.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import Hook, approval_store, gateway, of_type, wait_for
from gate_support import req
from host_support import OtherUser, shared_dir

from agent_saga import (
    ConfigurationError,
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    StepRefused,
    StoreUnavailable,
    saga_scope,
)
from agent_saga.approvals import (
    ApprovalEntry,
    ConsoleNotifier,
    Notification,
    SigningKey,
    Status,
    TrustedKeys,
    decide,
    trust_key,
)
from agent_saga.approvals._authority import default_trust_path
from agent_saga.approvals._entry import new_entry
from agent_saga.gate import ApprovalRequest
from agent_saga.gate.host import HOST_ROOT_ENV
from agent_saga.redaction import REDACTED

ARGS = {"amount": 80_000, "to": "acct_9"}


@pytest.fixture
def key() -> SigningKey:
    """An approver's key, trusted on this (test) host the way an operator would trust it."""
    signer = SigningKey.generate("risk@corp")
    assert trust_key(signer.public) is True
    return signer


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with approval_store(request.param, tmp_path) as s:
        yield s


def gate_for(store: Any, hook: Hook, wal: FileWAL) -> PreFlightGate:
    return PreFlightGate(approval_provider=gateway(store, hook.url, wal))


def wire(wal: FileWAL, gate: PreFlightGate, args: dict[str, Any] | None = None) -> list[str]:
    sent: list[str] = []
    with saga_scope(wal, gate=gate, saga_id="saga-1") as saga:
        saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: sent.append("wire"),
                     args=args or ARGS)
    return sent


def meanwhile(hook: Hook, act: Callable[[str], None]) -> threading.Thread:
    """Once the request has been announced, ``act(request_id)`` -- as the agent or as a person."""

    def run() -> None:
        wait_for(lambda: hook.count >= 1, "the notification")
        act(hook.requests()[0])

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def granted(entry: ApprovalEntry, approver: str | None = "risk@corp") -> ApprovalEntry:
    return entry.replace(status=Status.GRANTED, approver=approver, note="ok", decided_at=time.time(),
                         decided_via="cli")


def untrusted() -> SigningKey:
    return SigningKey.generate("risk@corp")  # same name, but nobody trusted this key


FORGERIES: dict[str, Callable[[ApprovalEntry, SigningKey], ApprovalEntry]] = {
    "no approver": lambda e, k: granted(e, None),
    "blank approver": lambda e, k: k.sign(granted(e, "")),
    "whitespace approver": lambda e, k: k.sign(granted(e, " \t ")),
    "zero-width approver": lambda e, k: k.sign(granted(e, "\u200b\u200c\u200d\u2060\ufeff")),
    "named but unsigned": lambda e, k: granted(e),
    "signed, then the approver edited": lambda e, k: k.sign(granted(e, "intern@corp")).replace(approver="cfo@corp"),
    "signed, then the note edited": lambda e, k: k.sign(granted(e)).replace(note="the CFO said yes"),
    "a signature that is not base64": lambda e, k: k.sign(granted(e)).replace(signature="%%%"),
    "signed by a key nobody trusted": lambda e, k: untrusted().sign(granted(e)),
    "signed for another request": lambda e, k: k.sign(granted(e.replace(id="0" * 32))).replace(id=e.id),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_grant_the_agent_wrote_into_the_store_is_denied_and_recorded(
    forgery: str, store: Any, key: SigningKey, hook: Hook, wal: FileWAL
) -> None:
    agent = meanwhile(hook, lambda rid: store.update(rid, lambda e: FORGERIES[forgery](e, key)))
    with pytest.raises(SagaAborted) as caught:
        wire(wal, gate_for(store, hook, wal))
    agent.join(30)
    cause = caught.value.__cause__
    assert isinstance(cause, StepRefused) and "not authenticated" in cause.reason
    records = list(wal.records())
    assert not of_type(records, "APPROVAL_GRANTED") and not of_type(records, "STEP_INTENT")
    (denied,) = of_type(records, "APPROVAL_DENIED")
    assert denied["body"]["approver"] is None and "not authenticated" in denied["body"]["note"]


def test_a_signature_over_other_arguments_than_the_step_has_is_denied(
    store: Any, key: SigningKey, hook: Hook, wal: FileWAL
) -> None:
    # The agent rewrites what the person will see (a small amount), the person approves
    # that in good faith, and the step would move the real amount.
    def shown_small_then_approved(rid: str) -> None:
        store.update(rid, lambda e: e.replace(args={"amount": 1, "to": "acct_9"}))
        decide(store, rid, "approve", approver="risk@corp", note="a one-dollar test", key=key)

    person = meanwhile(hook, shown_small_then_approved)
    with pytest.raises(SagaAborted) as caught:
        wire(wal, gate_for(store, hook, wal))
    person.join(30)
    assert "not authenticated" in caught.value.__cause__.reason  # type: ignore[union-attr]
    assert not of_type(list(wal.records()), "APPROVAL_GRANTED")


def test_a_decision_signed_through_the_api_by_a_trusted_key_is_accepted(
    store: Any, key: SigningKey, hook: Hook, wal: FileWAL
) -> None:
    person = meanwhile(hook, lambda rid: decide(store, rid, "approve", approver="risk@corp",
                                                note="verified by phone", key=key, via="web"))
    assert wire(wal, gate_for(store, hook, wal)) == ["wire"]
    person.join(30)
    (record,) = of_type(list(wal.records()), "APPROVAL_GRANTED")
    assert record["body"]["approver"] == "risk@corp" and record["body"]["signed_by"] == key.key_id


@pytest.mark.slow
def test_the_seed_cli_flow_after_one_time_setup(tmp_path: Path, hook: Hook, wal: FileWAL) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_saga", "approvals", *args], capture_output=True,
                              text=True, timeout=60, check=False)

    made = cli("keygen", "--approver", "risk@corp")
    assert made.returncode == 0, made.stderr
    key_file = Path(os.environ["AGENT_SAGA_HOME"]) / "approver.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    public = made.stdout.split("agent-saga approvals trust ")[1].split()[0].strip("'")
    assert cli("keygen", "--approver", "risk@corp").returncode == 2  # never overwrites a key
    trusted = cli("trust", public)
    assert trusted.returncode == 0, trusted.stderr
    assert public in default_trust_path().read_text()
    assert stat.S_IMODE(default_trust_path().stat().st_mode) == 0o644

    store = FileApprovalStore(tmp_path / "approvals")

    def approve(rid: str) -> None:
        out = cli("approve", rid[:8], "--approver", "risk@corp", "--note", "verified by phone",
                  "--store", str(store.path))
        assert out.returncode == 0, out.stderr

    person = meanwhile(hook, approve)
    assert wire(wal, gate_for(store, hook, wal)) == ["wire"]
    person.join(30)
    (record,) = of_type(list(wal.records()), "APPROVAL_GRANTED")
    assert record["body"]["signed_by"] == "+".join(public.split("+", 2)[:2])  # name+key id


@pytest.mark.slow
def test_the_cli_refuses_a_grant_it_cannot_sign_and_an_invisible_approver(tmp_path: Path, key: SigningKey) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    entry, _ = store.create(new_entry(ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible",
                                                      "x"), time.time(), 600, ((("@oncall",), 0.0),)))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_saga", "approvals", *args, "--store", str(store.path)],
                              capture_output=True, text=True, timeout=60, check=False)

    for name in ("\u200b", "\ufeff\u2060", " \u200d ", "risk\u200b@corp"):
        out = cli("approve", entry.id[:8], "--approver", name, "--key", str(tmp_path / "k"))
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        with pytest.raises(ConfigurationError, match="approver"):
            decide(store, entry.id, "approve", approver=name, key=key)
    out = cli("approve", entry.id[:8], "--approver", "risk@corp", "--key", str(tmp_path / "missing.key"))
    assert out.returncode == 2 and "agent-saga approvals keygen" in out.stderr
    with pytest.raises(ConfigurationError, match="signed"):
        decide(store, entry.id, "approve", approver="risk@corp")
    assert store.get(entry.id).status is Status.PENDING  # type: ignore[union-attr]


def test_an_unreadable_trust_list_denies(store: Any, key: SigningKey, hook: Hook, wal: FileWAL) -> None:
    default_trust_path().write_text("risk@corp+00000000+not-a-key\n")
    person = meanwhile(hook, lambda rid: decide(store, rid, "approve", approver="risk@corp", key=key))
    with pytest.raises(SagaAborted) as caught:
        wire(wal, gate_for(store, hook, wal))
    person.join(30)
    assert "trusted approver keys" in caught.value.__cause__.reason  # type: ignore[union-attr]


@pytest.mark.slow
def test_an_agent_running_as_another_user_cannot_trust_its_own_key_or_read_the_approvers() -> None:
    with shared_dir() as root:
        agent = OtherUser(root)
        env = {**os.environ, HOST_ROOT_ENV: str(root / "host"), "AGENT_SAGA_HOME": str(root / "operator")}

        def operator(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "agent_saga", *args], env=env, capture_output=True,
                                  text=True, timeout=60, check=False)

        assert operator("init-host").returncode == 0
        made = operator("approvals", "keygen", "--approver", "risk@corp")
        public = made.stdout.split("agent-saga approvals trust ")[1].split()[0].strip("'")
        assert operator("approvals", "trust", public).returncode == 0
        agent_env = agent.env(**{HOST_ROOT_ENV: str(root / "host")})
        own = SigningKey.generate("agent")
        sneaked = agent.run("-m", "agent_saga", "approvals", "trust", own.public, env=agent_env)
        assert sneaked.returncode == 3 and "Permission denied" in sneaked.stderr, sneaked.stderr
        stolen = agent.run("-c", f"open({str(root / 'operator' / 'approver.key')!r}).read()", env=agent_env)
        assert stolen.returncode != 0 and "PermissionError" in stolen.stderr
        readable = agent.run("-c", "from agent_saga.approvals import TrustedKeys; "
                                   "print(len(TrustedKeys.load().keys))", env=agent_env)
        assert readable.stdout.strip() == "1", readable.stderr  # it can check signatures, not make them


def test_secret_arguments_never_reach_the_store_the_approval_records_or_a_notification(
    tmp_path: Path, key: SigningKey, hook: Hook, wal: FileWAL
) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    args = {"amount": 5, "api_key": "sk_live_SECRET1", "headers": {"Authorization": "Bearer SECRET2"}}
    person = meanwhile(hook, lambda rid: decide(store, rid, "approve", approver="risk@corp", key=key))
    assert wire(wal, gate_for(store, hook, wal), args) == ["wire"]
    person.join(30)
    (entry,) = store.entries()
    assert entry.args == {"amount": 5, "api_key": REDACTED, "headers": {"Authorization": REDACTED}}
    texts = [p.read_text() for p in store.path.glob("*.json")]
    texts += [json.dumps(r["body"]) for r in wal.records() if r["type"].startswith("APPROVAL_")]
    texts += [json.dumps(b) for b in hook.bodies]
    console = io.StringIO()
    ConsoleNotifier(console).notify(Notification(entry, 0, ("@oncall",)))
    texts.append(console.getvalue())
    assert all("SECRET" not in text for text in texts)
    assert all(REDACTED in text for text in texts)


def test_the_file_store_is_private_to_its_user_unless_its_directory_is_shared(tmp_path: Path) -> None:
    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible", "x")
    private = FileApprovalStore(tmp_path / "private")
    e, _ = private.create(new_entry(request, time.time(), 60, ((("@a",), 0.0),)))
    assert mode(private.path) == 0o700 and mode(private.path / f"{e.id}.json") == 0o600
    assert mode(private.path / ".lock") == 0o600
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2770)  # an operator shared it with the approvers' group
    e, _ = FileApprovalStore(shared).create(new_entry(request, time.time(), 60, ((("@a",), 0.0),)))
    assert mode(shared / f"{e.id}.json") == 0o660 and mode(shared / ".lock") == 0o660


@pytest.mark.slow
def test_a_non_utf8_request_file_is_an_unreadable_store_not_a_traceback(
    tmp_path: Path, hook: Hook, wal: FileWAL
) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    request = new_entry(ApprovalRequest(req("wire.send", "IRREVERSIBLE", saga="saga-1", **ARGS), "irreversible",
                                        "x"), time.time(), 60, ((("@a",), 0.0),))
    store.path.mkdir()
    (store.path / f"{request.id}.json").write_bytes(b'{"version": 1, "note": "\xff"}')
    with pytest.raises(StoreUnavailable, match="UTF-8"):
        store.get(request.id)
    out = subprocess.run([sys.executable, "-m", "agent_saga", "approvals", "list", "--store", str(store.path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 3 and len(out.stderr.strip().splitlines()) == 1 and "UTF-8" in out.stderr
    with pytest.raises(SagaAborted) as caught:  # the agent's side: the store is unavailable, which denies
        wire(wal, gate_for(store, hook, wal))
    assert "approval store" in caught.value.__cause__.reason  # type: ignore[union-attr]
    assert hook.count == 0


def test_trusted_keys_are_read_from_a_file_or_given_in_code(tmp_path: Path, key: SigningKey) -> None:
    assert list(TrustedKeys.load().keys) == [key.key_id]
    assert trust_key(key.public) is False  # already there: not added twice
    listed = TrustedKeys.of([key.public], location="config")
    entry = new_entry(ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible", "x"),
                      time.time(), 60, ((("@a",), 0.0),))
    assert listed.verify(key.sign(granted(entry)), entry) == key.key_id
    with pytest.raises(ConfigurationError, match="line 2"):
        TrustedKeys.of(["# a comment", "garbage"], location="config")
    for empty in ("", "   ", "# a comment"):  # `approvals trust ''` raised a bare unpacking ValueError
        with pytest.raises(ConfigurationError, match=r"^the key to trust .* holds no key: give the line keygen printed"):
            trust_key(empty, tmp_path / "keys")
    assert not (tmp_path / "keys").exists()
