"""The gateway believes a passkey grant only over its own copy of the action.

Assertions come from a software authenticator (soft_authenticator.py) and are checked by
py_webauthn inside the gateway: the grant is written into the store as the agent could
write it, and the gateway's clock is fixed, so its deadline -- part of the challenge --
is known in advance. Every refusal must be recorded as a denial in the saga's log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from soft_authenticator import SoftAuthenticator

from agent_saga import ApprovalGateway, ApprovalPolicy, ConfigurationError, FileApprovalStore, FileWAL
from agent_saga.approvals import (
    ApprovalEntry,
    ApprovalNotAuthenticated,
    PasskeyCredentials,
    SigningKey,
    Status,
    decide,
    passkey_challenge,
    passkey_denial_challenge,
    trust_key,
    trust_passkey,
)
from agent_saga.approvals._entry import new_entry
from agent_saga.approvals._passkey import default_passkeys_path
from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalRequest
from agent_saga.semantics import ActionSemantics

NOW = 1_900_000_000.0
TIMEOUT = 600.0
LEVELS = ((("@oncall",), 0.0),)


def request(saga: str = "saga-1", **args: Any) -> ApprovalRequest:
    step = StepRequest(saga, 1, "refund", ActionSemantics.IRREVERSIBLE, args or {"amount": 100, "to": "acct_9"},
                       frozenset())
    return ApprovalRequest(step, "refunds", "refunds need a person")


class World:
    def __init__(self, tmp: Path) -> None:
        self.store = FileApprovalStore(tmp / "approvals")
        self.wal = FileWAL(tmp / "agent.wal")

    def gateway(self, now: float = NOW, **policy: Any) -> ApprovalGateway:
        policy.setdefault("require_passkey", True)
        return ApprovalGateway(store=self.store, wal=self.wal, clock=lambda: now,
                               policy=ApprovalPolicy(timeout=TIMEOUT, poll_interval=0.01, **policy))

    def grant(self, asked: ApprovalRequest, assertion: dict[str, Any] | None, now: float = NOW,
              approver: str = "mallory@agent", **extra: Any) -> ApprovalEntry:
        """The store entry as the agent can write it: a grant carrying ``assertion``."""
        entry = new_entry(asked, now, TIMEOUT, LEVELS).replace(
            status=Status.GRANTED, approver=approver, decided_at=now, decided_via="passkey", passkey=assertion,
            **extra)
        self.store.create(entry)
        return entry

    def deny(self, asked: ApprovalRequest, assertion: dict[str, Any] | None, note: str = "",
             approver: str = "mallory@agent") -> ApprovalEntry:
        """The store entry as ``approvals serve`` writes a passkey denial (or the agent could)."""
        entry = new_entry(asked, NOW, TIMEOUT, LEVELS).replace(
            status=Status.DENIED, approver=approver, decided_at=NOW, decided_via="passkey", note=note,
            passkey=assertion)
        self.store.create(entry)
        return entry

    def key_signed_grant(self, asked: ApprovalRequest) -> None:
        """A grant decided through the CLI: signed by a key the host trusts, with no passkey."""
        key = SigningKey.generate("risk@corp")
        trust_key(key.public)
        entry = new_entry(asked, NOW, TIMEOUT, LEVELS).replace(
            status=Status.GRANTED, approver="risk@corp", decided_at=NOW, decided_via="cli")
        self.store.create(key.sign(entry))

    def bodies(self, rtype: str, saga: str | None = None) -> list[dict[str, Any]]:
        return [r["body"] for r in self.wal.records() if r["type"] == rtype and saga in (None, r["saga"])]


@pytest.fixture
def world(tmp_path: Path) -> Any:
    w = World(tmp_path)
    yield w
    w.wal.close()


def registered(alg: int = -8, sign_count: int = 0) -> SoftAuthenticator:
    authenticator = SoftAuthenticator(alg)
    assert trust_passkey(authenticator.registered(sign_count).to_line()) is True
    return authenticator


def challenge_for(asked: ApprovalRequest, now: float = NOW) -> bytes:
    entry = new_entry(asked, now, TIMEOUT, LEVELS)
    return passkey_challenge(entry, entry.deadline)


def denial_challenge_for(asked: ApprovalRequest, note: str = "", now: float = NOW) -> bytes:
    entry = new_entry(asked, now, TIMEOUT, LEVELS)
    return passkey_denial_challenge(entry, entry.deadline, note)


def refused(world: World, asked: ApprovalRequest, *words: str, now: float = NOW) -> str:
    with pytest.raises(ApprovalNotAuthenticated) as caught:
        world.gateway(now).request_approval(asked)
    saga = asked.step.saga_id
    (denial,) = world.bodies("APPROVAL_DENIED", saga)
    assert denial["approver"] is None and denial["note"] == str(caught.value)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    assert not world.bodies("APPROVAL_GRANTED", saga)
    return str(caught.value)


@pytest.mark.parametrize("alg", [-8, -7], ids=["Ed25519", "ES256"])
def test_an_assertion_over_this_action_grants_and_its_count_is_recorded(world: World, alg: int) -> None:
    authenticator = registered(alg)
    asked = request()
    world.grant(asked, authenticator.assertion(challenge_for(asked)))
    decision = world.gateway().request_approval(asked)
    # The approver is the registered passkey's, not the name the store (the agent) gives.
    assert decision.approved and decision.approver == "risk@corp"
    (granted,) = world.bodies("APPROVAL_GRANTED")
    assert granted["approver"] == "risk@corp"
    assert granted["passkey"]["sign_count"] == 1 and granted["passkey"]["user_verified"] is True
    assert granted["passkey"]["challenge"] == challenge_for(asked).hex()
    assert granted["passkey"]["algorithm"] == {-8: "Ed25519", -7: "ES256"}[alg]
    (asked_record,) = world.bodies("APPROVAL_REQUESTED")
    assert asked_record["passkey"]["challenge"] == challenge_for(asked).hex()
    # A restarted gateway concluding the same grant in the same log neither refuses it nor logs it twice.
    assert world.gateway().request_approval(asked).approved
    assert len(world.bodies("APPROVAL_GRANTED")) == 1


def test_a_changed_amount_is_refused(world: World) -> None:
    authenticator = registered()
    shown = request(amount=5, to="acct_9")  # what the store showed the person
    world.grant(request(amount=5000, to="acct_9"), authenticator.assertion(challenge_for(shown)))
    refused(world, request(amount=5000, to="acct_9"), "another action", challenge_for(request(amount=5000,
                                                                                              to="acct_9")).hex())


def test_another_requests_assertion_is_refused(world: World) -> None:
    authenticator = registered()
    other = request(saga="saga-2")
    world.grant(request(), authenticator.assertion(challenge_for(other)))
    refused(world, request(), "another action")


def test_an_assertion_for_an_earlier_run_of_the_same_request_is_refused(world: World) -> None:
    # Approved an hour ago (deadline then), presented to a gateway asking now in a log that never
    # asked: the deadline is part of the challenge, and this gateway's is its own.
    authenticator = registered()
    earlier = NOW - 3600
    world.grant(request(), authenticator.assertion(challenge_for(request(), earlier)), now=earlier)
    refused(world, request(), "another action")


def test_user_not_verified_is_refused(world: World) -> None:
    authenticator = registered()
    world.grant(request(), authenticator.assertion(challenge_for(request()), uv=False))
    refused(world, request(), "verif")


def test_an_unregistered_passkey_is_refused(world: World) -> None:
    stranger = SoftAuthenticator()  # never added to the host's list
    world.grant(request(), stranger.assertion(challenge_for(request())))
    refused(world, request(), "not registered")


def test_an_assertion_from_another_origin_is_refused(world: World) -> None:
    authenticator = registered()
    world.grant(request(), authenticator.assertion(challenge_for(request()), origin="https://evil.example"))
    refused(world, request(), "origin")


def test_a_key_signed_grant_does_not_count_where_a_passkey_is_required(world: World) -> None:
    world.key_signed_grant(request())
    refused(world, request(), "requires a passkey")


def test_require_passkey_per_rule_leaves_other_rules_to_signed_grants(world: World) -> None:
    world.key_signed_grant(request())
    assert world.gateway(require_passkey=("wires",)).request_approval(request()).approved


def test_a_cloned_authenticator_whose_count_did_not_move_is_refused(world: World) -> None:
    authenticator = registered()
    first = request(saga="saga-1")
    world.grant(first, authenticator.assertion(challenge_for(first), count=7))
    assert world.gateway().request_approval(first).approved
    second = request(saga="saga-2")
    # Same key, count 7 again: what a copy of the authenticator would report.
    world.grant(second, authenticator.assertion(challenge_for(second), count=7))
    refused(world, second, "sign count of 7 was not greater than current count of 7")


def test_a_count_below_the_registered_one_is_refused(world: World) -> None:
    authenticator = registered(sign_count=40)
    world.grant(request(), authenticator.assertion(challenge_for(request()), count=3))
    refused(world, request(), "not greater")


def test_an_authenticator_that_always_reports_zero_passes_the_count_rule(world: World) -> None:
    # WebAuthn's rule: the count is checked when either side is non-zero. Both zero: not checked
    # (the challenge, bound to one request and deadline, is what stops a replay then).
    authenticator = registered(sign_count=0)
    for saga in ("saga-1", "saga-2"):
        asked = request(saga=saga)
        world.grant(asked, authenticator.assertion(challenge_for(asked), count=0))
        assert world.gateway().request_approval(asked).approved
    # ...but once a count was seen, a zero is not forward.
    world.grant(request(saga="saga-3"), authenticator.assertion(challenge_for(request(saga="saga-3")), count=5))
    assert world.gateway().request_approval(request(saga="saga-3")).approved
    world.grant(request(saga="saga-4"), authenticator.assertion(challenge_for(request(saga="saga-4")), count=0))
    with pytest.raises(ApprovalNotAuthenticated, match="not greater"):
        world.gateway().request_approval(request(saga="saga-4"))


def test_a_passkey_list_others_may_write_is_refused(world: World) -> None:
    authenticator = registered()
    os.chmod(default_passkeys_path(), 0o666)
    world.grant(request(), authenticator.assertion(challenge_for(request())))
    refused(world, request(), "writable by group or others", "chmod go-w")
    with pytest.raises(ConfigurationError, match="chmod go-w"):
        PasskeyCredentials.load()


def test_a_gateway_without_a_registered_list_refuses_and_says_where(world: World) -> None:
    authenticator = SoftAuthenticator()
    world.grant(request(), authenticator.assertion(challenge_for(request())))
    refused(world, request(), str(default_passkeys_path()), "no passkeys")


# -- Deny with passkey: a denial's own challenge, checked like a grant ------------------------------------


def test_the_grant_challenge_is_what_it_always_was() -> None:
    # Logs written before denials had a challenge keep verifying: the grant's digest is pinned.
    assert challenge_for(request()).hex() == "38f0e053830a8531a4dd976894b128080932e939fbbc90deda1c1d6f8ab47b81"


@given(note=st.text(max_size=40), amount=st.integers(), saga=st.text(min_size=1, max_size=8))
def test_a_denial_challenge_is_never_a_grant_challenge(note: str, amount: int, saga: str) -> None:
    asked = request(saga=saga, amount=amount)
    deny = denial_challenge_for(asked, note)
    assert deny != challenge_for(asked)
    assert len(deny) == 32 and deny != denial_challenge_for(asked, note + "x")


@pytest.mark.parametrize("alg", [-8, -7], ids=["Ed25519", "ES256"])
def test_a_verified_passkey_denial_refuses_the_step_is_final_and_logged_with_its_evidence(
        world: World, alg: int) -> None:
    authenticator = registered(alg)
    asked = request()
    world.deny(asked, authenticator.assertion(denial_challenge_for(asked, "wrong account")), note="wrong account")
    decision = world.gateway().request_approval(asked)
    # A denial by the registered passkey's owner, whatever name the store gives.
    assert not decision.approved and decision.approver == "risk@corp" and decision.note == "wrong account"
    (denied,) = world.bodies("APPROVAL_DENIED")
    assert denied["approver"] == "risk@corp" and denied["note"] == "wrong account"
    evidence = denied["passkey"]
    assert evidence["credential_id"] == authenticator.credential_id
    assert evidence["algorithm"] == {-8: "Ed25519", -7: "ES256"}[alg]
    assert evidence["sign_count"] == 1 and evidence["user_verified"] is True
    assert evidence["challenge"] == denial_challenge_for(asked, "wrong account").hex()
    assert not world.bodies("APPROVAL_GRANTED")
    # Final: the agent rewrites the store entry into a grant with a genuine assertion; the log's no stands.
    world.store.update(denied["request"], lambda e: e.replace(
        status=Status.GRANTED, passkey=authenticator.assertion(challenge_for(asked)), note=""))
    again = world.gateway().request_approval(asked)
    assert not again.approved and again.approver == "risk@corp" and "remembered from the log" in again.note
    assert not world.bodies("APPROVAL_GRANTED") and len(world.bodies("APPROVAL_DENIED")) == 1


def test_a_grant_assertion_relabelled_denied_is_not_a_verified_denial(world: World) -> None:
    authenticator = registered()
    asked = request()
    entry = world.deny(asked, authenticator.assertion(challenge_for(asked)), approver="risk@corp")
    # Refused all the same (fail safe), recorded as a denial by nobody...
    refused(world, asked, "not made to deny this action", "denial by nobody (not final)")
    # ...which is not final: the person is asked again and a genuine grant counts.
    world.store.update(entry.id, lambda e: e.replace(
        status=Status.GRANTED, passkey=authenticator.assertion(challenge_for(asked))))
    assert world.gateway().request_approval(asked).approved


def test_a_denial_whose_note_was_rewritten_is_not_a_verified_denial(world: World) -> None:
    authenticator = registered()
    asked = request()
    # The person denied with one note; the agent rewrote it in the store before the gateway read it.
    world.deny(asked, authenticator.assertion(denial_challenge_for(asked, "wrong account")),
               note="approved next time, go ahead")
    refused(world, asked, "not made to deny this action with this note")


def test_a_denial_assertion_relabelled_granted_is_refused(world: World) -> None:
    authenticator = registered()
    asked = request()
    world.grant(asked, authenticator.assertion(denial_challenge_for(asked)))
    refused(world, asked, "another action")


def test_a_replayed_denial_assertion_is_refused_and_its_count_counts(world: World) -> None:
    authenticator = registered()
    first = request(saga="saga-1")
    denial = authenticator.assertion(denial_challenge_for(first), count=7)
    world.deny(first, denial)
    assert world.gateway().request_approval(first).approver == "risk@corp"
    # The same assertion presented as another request's grant, or as another request's denial.
    world.grant(request(saga="saga-2"), denial)
    refused(world, request(saga="saga-2"), "a replay")
    world.deny(request(saga="saga-3"), denial, approver="risk@corp")
    refused(world, request(saga="saga-3"), "a replay", "denial by nobody")
    # The denial's count is the credential's last: count 7 again (a cloned authenticator) is not forward.
    fourth = request(saga="saga-4")
    world.grant(fourth, authenticator.assertion(challenge_for(fourth), count=7))
    refused(world, fourth, "sign count of 7 was not greater than current count of 7")


def test_a_key_signed_denial_still_counts_where_a_passkey_is_required(world: World) -> None:
    # A denial only stops a step: `approvals deny` (key-signed) is final under require_passkey too.
    key = SigningKey.generate("risk@corp")
    trust_key(key.public)
    entry = new_entry(request(), NOW, TIMEOUT, LEVELS)
    world.store.create(entry)
    decide(world.store, entry.id, "deny", approver="risk@corp", note="no", key=key, clock=lambda: NOW)
    decision = world.gateway().request_approval(request())
    assert not decision.approved and decision.approver == "risk@corp"
    (denied,) = world.bodies("APPROVAL_DENIED")
    assert denied["approver"] == "risk@corp" and denied["signed_by"] is not None and "passkey" not in denied
