"""Passkey approvals, the parts the core checks without the `passkey` extra.

The challenge a passkey signs, the policy that asks for one, the registered list's format and
permissions, and what happens where py_webauthn is absent: a gateway that would need it does not
start, and says how to install it; a passkey-looking grant is never believed without it. The
WebAuthn checks themselves run in tests/passkey (``python3 -m tox run -e passkey``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import ApprovalGateway, ApprovalPolicy, ConfigurationError, FileApprovalStore, FileWAL
from agent_saga.approvals import (
    ApprovalEntry,
    ApprovalNotAuthenticated,
    PasskeyCredential,
    PasskeyCredentials,
    Status,
    passkey_challenge,
    trust_passkey,
)
from agent_saga.approvals._entry import new_entry
from agent_saga.approvals._passkey import default_passkeys_path, passkey_history
from agent_saga.cli.main import main
from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalRequest
from agent_saga.semantics import ActionSemantics

HAS_WEBAUTHN = importlib.util.find_spec("webauthn") is not None
without_extra = pytest.mark.skipif(HAS_WEBAUTHN, reason="the passkey extra is installed here: tests/passkey "
                                                          "checks the same paths with it")
LEVELS = ((("@oncall",), 0.0),)


def entry(**changes: Any) -> ApprovalEntry:
    step = StepRequest("saga-1", 1, "refund", ActionSemantics.IRREVERSIBLE, {"amount": 100, "to": "acct_9"},
                       frozenset())
    return new_entry(ApprovalRequest(step, "refunds", "refunds need a person"), 1000.0, 600.0, LEVELS).replace(
        **changes)


def line(**changes: Any) -> str:
    data = {"credential_id": "AAECAw", "approver": "risk@corp", "public_key": "pQECAyYgASFYIA", "algorithm": -7,
            "sign_count": 0, "rp_id": "localhost", "origin": "http://localhost:8765", **changes}
    return json.dumps(data)


_FIELDS = {
    "id": st.text("0123456789abcdef", min_size=32, max_size=32),
    "saga_id": st.text(min_size=1, max_size=20),
    "step": st.integers(0, 10**6),
    "tool": st.text(min_size=1, max_size=20),
    "rule": st.text(min_size=1, max_size=20),
    "args": st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4),
}


@given(field=st.sampled_from([*_FIELDS, "deadline"]), data=st.data())
def test_the_challenge_changes_with_every_part_of_the_action(field: str, data: st.DataObject) -> None:
    base = entry()
    if field == "deadline":
        other = data.draw(st.floats(allow_nan=False, allow_infinity=False).filter(lambda d: d != base.deadline))
        assert passkey_challenge(base, other) != passkey_challenge(base, base.deadline)
        return
    value = data.draw(_FIELDS[field].filter(lambda v: v != getattr(base, field)))
    assert passkey_challenge(base.replace(**{field: value}), base.deadline) != passkey_challenge(base, base.deadline)


def test_the_challenge_is_32_bytes_and_ignores_what_the_action_is_not() -> None:
    base = entry()
    challenge = passkey_challenge(base, base.deadline)
    assert len(challenge) == 32
    # The decision's own fields (who, when, the store's deadline field) are not the action.
    assert passkey_challenge(base.replace(status=Status.GRANTED, approver="x", note="n", deadline=1.0),
                             base.deadline) == challenge


def test_require_passkey_takes_true_or_rule_names() -> None:
    assert ApprovalPolicy(timeout=60).needs_passkey("refunds") is False
    assert ApprovalPolicy(timeout=60, require_passkey=True).needs_passkey("anything") is True
    per_rule = ApprovalPolicy(timeout=60, require_passkey=("refunds",))
    assert per_rule.needs_passkey("refunds") and not per_rule.needs_passkey("wires")
    with pytest.raises(ConfigurationError, match=r"require_passkey=\('refunds',\)"):
        ApprovalPolicy(timeout=60, require_passkey="refunds")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty tuple of rule names"):
        ApprovalPolicy(timeout=60, require_passkey=())


@without_extra
def test_a_gateway_that_needs_a_passkey_does_not_start_without_the_extra() -> None:
    with pytest.raises(ConfigurationError, match=r"pip install 'agent-saga\[passkey\]"):
        ApprovalGateway(policy=ApprovalPolicy(timeout=60, require_passkey=True))


@without_extra
def test_approvals_serve_without_the_extra_says_how_to_install_it(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    assert main(["approvals", "serve", "--store", str(tmp_path / "approvals"), "--port", "0"]) == 2
    assert "pip install 'agent-saga[passkey]" in capsys.readouterr().err


@without_extra
def test_a_passkey_grant_is_not_believed_where_it_cannot_be_checked(tmp_path: Path) -> None:
    # The policy does not ask for a passkey, but the agent writes a grant that carries one:
    # without py_webauthn it cannot be checked, so it is denied (and recorded), never waved through.
    store, wal = FileApprovalStore(tmp_path / "approvals"), FileWAL(tmp_path / "agent.wal")
    asked = entry()
    store.create(asked.replace(status=Status.GRANTED, approver="risk@corp", decided_at=1000.0,
                               decided_via="passkey", passkey={"id": "AAECAw", "response": {"signature": "AA"}}))
    step = StepRequest("saga-1", 1, "refund", ActionSemantics.IRREVERSIBLE, {"amount": 100, "to": "acct_9"},
                       frozenset())
    gateway = ApprovalGateway(store=store, wal=wal, policy=ApprovalPolicy(timeout=600.0), clock=lambda: 1000.0)
    try:
        with pytest.raises(ApprovalNotAuthenticated, match=r"agent-saga\[passkey\]"):
            gateway.request_approval(ApprovalRequest(step, "refunds", "refunds need a person"))
        denials = [r["body"] for r in wal.records() if r["type"] == "APPROVAL_DENIED"]
        assert len(denials) == 1 and denials[0]["approver"] is None
    finally:
        wal.close()


def test_the_registered_list_is_created_for_root_to_change_and_read_back() -> None:
    assert trust_passkey(line()) is True
    assert trust_passkey(line()) is False  # already there
    path = default_passkeys_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    (credential,) = PasskeyCredentials.load().credentials.values()
    assert credential == PasskeyCredential.from_line(line(), "x")


def test_a_registered_list_group_or_others_may_write_is_refused() -> None:
    trust_passkey(line())
    os.chmod(default_passkeys_path(), 0o664)
    with pytest.raises(ConfigurationError, match=r"writable by group or others .*chmod go-w"):
        PasskeyCredentials.load()
    os.chmod(default_passkeys_path(), 0o644)
    os.chmod(default_passkeys_path().parent, 0o777)
    with pytest.raises(ConfigurationError, match="writable by group or others"):
        PasskeyCredentials.load()


@pytest.mark.parametrize(("change", "said"), [
    ({"algorithm": -257}, "only Ed25519 -8 and ES256 -7"),
    ({"approver": "risk\u202e@corp"}, "invisible or control characters"),
    ({"approver": ""}, "named approver"),
    ({"public_key": "not base64!"}, "public_key is not base64url"),
])
def test_a_registered_line_that_could_mislead_is_refused(change: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigurationError, match=said):
        trust_passkey(line(**change))


def test_a_store_entry_without_a_passkey_reads_and_writes_as_before() -> None:
    plain = entry()
    assert "passkey" not in plain.to_json()
    carried = plain.replace(passkey={"id": "AAECAw"})
    assert ApprovalEntry.from_json(carried.to_json()) == carried
    assert ApprovalEntry.from_json(plain.to_json()).passkey is None


def test_the_history_is_the_highest_count_per_credential_and_who_took_each_assertion() -> None:
    def grant(request: str, count: Any, fingerprint: str) -> dict[str, Any]:
        return {"type": "APPROVAL_GRANTED", "body": {"request": request, "passkey": {
            "credential_id": "c1", "sign_count": count, "assertion": fingerprint}}}

    records = [grant("r1", 3, "f1"), grant("r2", 9, "f2"), grant("r3", 4, "f3"), grant("r4", True, "f4"),
               {"type": "APPROVAL_EXPIRED", "body": {"request": "r6", "passkey": {"credential_id": "c1",
                                                                                  "sign_count": 500}}},
               {"type": "APPROVAL_DENIED", "body": {"request": "r7", "approver": None, "note": "not authenticated"}}]
    history = passkey_history(records)
    # An expiry carries no passkey the authenticator was seen to use; a boolean is no count.
    assert history.counts == {"c1": 9}
    assert history.accepted == {"f1": "r1", "f2": "r2", "f3": "r3", "f4": "r4"}
    # A passkey denial (the gateway records one only once it verified) takes part like a grant:
    # its count is the credential's last, and its assertion is taken.
    denied = {"type": "APPROVAL_DENIED", "body": {"request": "r5", "passkey": {
        "credential_id": "c1", "sign_count": 12, "assertion": "f5"}}}
    history = passkey_history([*records, denied])
    assert history.counts == {"c1": 12} and history.accepted["f5"] == "r5"


def test_approvals_list_marks_a_passkey_denial_as_one_the_gateway_checks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    store.create(entry().replace(status=Status.DENIED, approver="risk@corp", decided_at=1000.0,
                                 decided_via="passkey", note="wrong \u202eaccount", passkey={"id": "AAECAw"}))
    assert main(["approvals", "list", "--all", "--store", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "risk@corp (passkey denial: the waiting gateway checks the assertion; final only if it verifies)" in out
    assert "wrong \\u202eaccount" in out and "\u202e" not in out


def test_approvals_list_names_a_passkey_grant_and_marks_the_reason_it_does_not_cover(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    store.create(entry().replace(status=Status.GRANTED, approver="risk@corp", decided_at=1000.0,
                                 decided_via="passkey", passkey={"id": "AAECAw"}))
    assert main(["approvals", "list", "--all", "--store", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "risk@corp (passkey grant: the waiting gateway checks the assertion" in out
    assert "refunds need a person (unsigned)" in out
    assert "NOT AUTHENTICATED" not in out


def test_init_host_creates_the_passkey_list_for_root_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init-host"]) == 0
    path = default_passkeys_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert f"{path}: registered passkeys; mode 644" in capsys.readouterr().out
    assert PasskeyCredentials.load().credentials == {}  # an empty list is no error, and trusts nobody
