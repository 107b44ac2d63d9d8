"""The approval stores' contract (file and Redis alike), ids, prefixes, policy and input checks."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import approval_store
from gate_support import req
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    ApprovalPolicy,
    ConfigurationError,
    EscalationLevel,
    FileApprovalStore,
    StoreUnavailable,
    WebhookNotifier,
)
from agent_saga.approvals import (
    ApprovalEntry,
    ApprovalNotFound,
    ApprovalNotPending,
    RedisApprovalStore,
    SigningKey,
    Status,
    decide,
    find,
    request_id,
)
from agent_saga.approvals._entry import SHORT_ID, new_entry, short_ids
from agent_saga.gate import ApprovalRequest

LEVELS = ((("@oncall",), 0.0),)


def entry(saga: str = "saga-1", step: int = 1, timeout: float = 60.0, **args: Any) -> ApprovalEntry:
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", saga=saga, step=step, **args), "irreversible", "why")
    return new_entry(request, time.time(), timeout, LEVELS)


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with approval_store(request.param, tmp_path) as s:
        yield s


def test_create_is_create_if_absent_and_keeps_the_first(store: Any) -> None:
    first = entry(amount=1)
    stored, created = store.create(first)
    assert created and stored == first
    again, created = store.create(first.replace(note="a second attempt", created_at=first.created_at + 5))
    assert not created and again == first  # the original request (and its deadline) stand
    assert store.get(first.id) == first
    assert store.entries() == [first]
    assert store.get(request_id("nobody", 1, "x", "y")) is None


def test_update_is_atomic_under_contention(store: Any) -> None:
    e, _ = store.create(entry())
    winners: list[int] = []
    lock = threading.Lock()

    def claim(level: int) -> None:
        def change(cur: ApprovalEntry) -> ApprovalEntry:
            if level in cur.escalated:
                return cur
            return cur.replace(escalated=(*cur.escalated, level))

        store.update(e.id, change)

    def racer(i: int) -> None:
        for level in range(20):
            claim(level)
        with lock:
            winners.append(i)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = store.get(e.id)
    assert final is not None and sorted(final.escalated) == list(range(20))  # each level once, none lost
    assert len(final.escalated) == 20 and len(winners) == 6


def test_update_of_a_missing_request_says_so(store: Any) -> None:
    with pytest.raises(ApprovalNotFound):
        store.update(request_id("s", 1, "t", "r"), lambda e: e)


_CHILD = """
import os, sys, time
from agent_saga.approvals import FileApprovalStore
from agent_saga.approvals._entry import new_entry
from agent_saga.engine.ports import StepRequest
from agent_saga.gate._approval import ApprovalRequest
from agent_saga.semantics import ActionSemantics
go = sys.argv[2]
while not os.path.exists(go):  # start together, to race for the create
    time.sleep(0.001)
step = StepRequest("saga-x", 1, "wire.send", ActionSemantics.IRREVERSIBLE, {"amount": 1})
entry = new_entry(ApprovalRequest(step, "irreversible", "why"), time.time(), 60.0, ((("@a",), 0.0),))
print(FileApprovalStore(sys.argv[1]).create(entry)[1])
"""


@pytest.mark.slow
def test_many_processes_asking_at_once_make_one_request(tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path / "a"), str(go)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    go.write_text("")
    results = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(results) == ["False", "False", "False", "True"]
    assert len(FileApprovalStore(tmp_path / "a").entries()) == 1


def test_a_corrupt_request_file_is_unavailable_not_pending(tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path)
    e, _ = store.create(entry())
    (tmp_path / f"{e.id}.json").write_text("{not json")
    with pytest.raises(StoreUnavailable, match="unreadable"):
        store.get(e.id)


def test_a_dead_redis_is_unavailable() -> None:
    from gate_support import dead_port

    s = RedisApprovalStore(f"redis://127.0.0.1:{dead_port()}/0", timeout=0.3)
    for op in (lambda: s.create(entry()), lambda: s.get(entry().id), s.entries,
               lambda: s.update(entry().id, lambda e: e)):
        with pytest.raises(StoreUnavailable, match="could not"):
            op()
    s.client.close()


def test_an_entry_round_trips_through_json() -> None:
    e = entry(amount=80_000, to="acct_9", blob=object()).replace(
        status=Status.GRANTED, approver="a", note="n", decided_at=1.5, escalated=(0,), notified=(0,),
        logged=("requested@/x",), claims={"decided@/x": 2.0}, signer="a+0011aabb", signature="c2ln")
    assert ApprovalEntry.from_json(json.loads(json.dumps(e.to_json()))) == e
    assert e.args["blob"] == "<object>"  # what the log would write, not a crash
    with pytest.raises(ValueError, match="version-1"):
        ApprovalEntry.from_json({"id": "x"})


@settings(max_examples=examples(200), deadline=None)
@given(st.tuples(st.text(min_size=1, max_size=20), st.integers(1, 10_000), st.text(max_size=20), st.text(max_size=20)),
       st.tuples(st.text(min_size=1, max_size=20), st.integers(1, 10_000), st.text(max_size=20), st.text(max_size=20)))
def test_the_request_id_is_a_pure_function_of_saga_step_tool_and_rule(
    a: tuple[str, int, str, str], b: tuple[str, int, str, str]
) -> None:
    assert request_id(*a) == request_id(*a)
    assert len(request_id(*a)) == 32
    assert (request_id(*a) == request_id(*b)) == (a == b)


@pytest.mark.slow  # heavy (many examples or shapes): left to the full core env
@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.from_regex(r"[0-9a-f]{32}", fullmatch=True), min_size=1, max_size=30, unique=True),
       st.data())
def test_shown_ids_are_unique_prefixes_that_find_their_request(ids: list[str], data: st.DataObject) -> None:
    shown = short_ids(ids)
    assert set(shown) == set(ids)
    for rid, prefix in shown.items():
        assert rid.startswith(prefix) and len(prefix) >= SHORT_ID
        assert [other for other in ids if other.startswith(prefix)] == [rid]


def test_find_accepts_a_unique_prefix_as_shown_and_names_ambiguity(tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path)
    a, _ = store.create(entry(saga="a"))
    b, _ = store.create(entry(saga="b"))
    assert find(store, a.id[:8]) == a
    assert find(store, a.id[:8] + "...") == a  # pasted with the ellipsis the list shows
    assert find(store, b.id.upper()) == b
    common = next(i for i in range(32) if a.id[i] != b.id[i])
    if common >= 4:
        with pytest.raises(ApprovalNotFound, match="matches 2"):
            find(store, a.id[:common])
    with pytest.raises(ApprovalNotFound, match="at least 4 hex"):
        find(store, "zz")
    with pytest.raises(ApprovalNotFound, match="no approval request"):
        find(store, "ffff" if not a.id.startswith("ffff") and not b.id.startswith("ffff") else "0000")


def test_decide_refuses_anonymity_a_second_answer_and_a_late_one(tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path)
    e, _ = store.create(entry())
    for nobody in ("", "   "):
        with pytest.raises(ConfigurationError, match="anonymous approval proves nothing"):
            decide(store, e.id, "approve", approver=nobody)
    with pytest.raises(ConfigurationError, match="break-glass needs"):
        decide(store, e.id, "break-glass", approver="cto@corp", key=SigningKey.generate("cto@corp"))
    key = SigningKey.generate("risk@corp")
    decided = decide(store, e.id, "approve", approver="risk@corp", note="ok", key=key)
    assert decided.status is Status.GRANTED and decided.approver == "risk@corp"
    with pytest.raises(ApprovalNotPending, match="already GRANTED by risk@corp"):
        decide(store, e.id, "deny", approver="someone@corp")
    late, _ = store.create(entry(saga="late", timeout=0.001))
    time.sleep(0.01)
    with pytest.raises(ApprovalNotPending, match="expired"):
        decide(store, late.id, "approve", approver="risk@corp", key=key)
    assert store.get(late.id).status is Status.PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: ApprovalPolicy(timeout=0), "greater than 0"),
    (lambda: ApprovalPolicy(timeout=float("inf")), "finite"),
    (lambda: ApprovalPolicy(timeout="900"), "finite number"),  # type: ignore[arg-type]
    (lambda: ApprovalPolicy(timeout=10, levels=()), "at least one EscalationLevel"),
    (lambda: ApprovalPolicy(timeout=10, levels=(EscalationLevel(("@a",), after_seconds=20),)), "nobody would ever"),
    (lambda: ApprovalPolicy(timeout=10, levels=(EscalationLevel(("@a",), 5), EscalationLevel(("@b",), 1))),
     "in the order"),
    (lambda: ApprovalPolicy(timeout=10, levels=("@oncall",)), "must be an EscalationLevel"),  # type: ignore[arg-type]
    (lambda: EscalationLevel(targets="@oncall"), r"targets=\('@oncall',\)"),  # type: ignore[arg-type]
    (lambda: EscalationLevel(targets=()), "at least one person"),
    (lambda: EscalationLevel(targets=("@a",), after_seconds=-1), "at least 0"),
    (lambda: WebhookNotifier("hooks.slack.com/services/x"), "http"),
    (lambda: WebhookNotifier("http://127.0.0.1:1/x", timeout=0), "positive"),
])
def test_bad_configuration_is_named(make: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_the_gateway_requires_a_policy_and_real_parts(tmp_path: Path) -> None:
    from agent_saga import ApprovalGateway

    with pytest.raises(ConfigurationError, match="ApprovalPolicy"):
        ApprovalGateway(policy=900)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="approval store"):
        ApprovalGateway(store=object(), policy=ApprovalPolicy(timeout=1))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="notify"):
        ApprovalGateway(notifier=object(), policy=ApprovalPolicy(timeout=1))  # type: ignore[arg-type]
