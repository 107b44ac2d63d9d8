"""The proxy end to end: the seed's command lines, a real SDK stdio client, a real server.

Every test checks the server's own world (its charges file and its log of the calls it
received), not only what the client was told.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from typing import Any

import pytest
import redis
from conftest import (
    POLICY,
    SEED_ENFORCE,
    McpError,
    World,
    connect,
    error_flag,
    run_cli,
    structured,
    types_of,
    write_policy,
)

from agent_saga.engine.retry import COMPENSATION_RETRY
from agent_saga.log import read_records
from agent_saga.log.redis import RedisWAL

pytestmark = pytest.mark.slow

SEED_OBSERVE = ["agent-saga", "mcp", "--observe", "--emit-policy", "saga-policy.json", "--", "python", "-m", "my_mcp_server"]


# -- observe --------------------------------------------------------------------------


async def test_observe_forwards_everything_and_emits_an_all_irreversible_skeleton(world: World) -> None:
    async with connect(SEED_OBSERVE, world) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("delete_everything", {})
    assert not error_flag(result)
    assert world.called() == ["delete_everything"]  # observe mode stops nothing
    policy = json.loads((world.root / "saga-policy.json").read_text())
    assert policy["mode"] == "enforce"
    assert sorted(policy["tools"]) == sorted(listed) == [
        "create_charge", "create_refund", "delete_everything", "search_docs"]
    for entry in policy["tools"].values():
        assert entry["semantics"] == "IRREVERSIBLE" and "TODO" in entry["description"]


async def test_observing_again_adds_new_tools_and_never_touches_reviewed_entries(world: World) -> None:
    reviewed = {
        "mode": "enforce",
        "tools": {
            "create_charge": POLICY["tools"]["create_charge"],
            "search_*": {"semantics": "REVERSIBLE", "description": "reviewed by sec"},
        },
    }
    write_policy(world, reviewed)
    async with connect(SEED_OBSERVE, world) as client:
        await client.list_tools()
    policy = json.loads((world.root / "saga-policy.json").read_text())
    assert policy["tools"]["create_charge"] == POLICY["tools"]["create_charge"]
    assert policy["tools"]["search_*"] == {"semantics": "REVERSIBLE", "description": "reviewed by sec"}
    assert "search_docs" not in policy["tools"]  # the glob already classifies it
    assert policy["tools"]["create_refund"]["semantics"] == "IRREVERSIBLE"
    assert policy["tools"]["delete_everything"]["semantics"] == "IRREVERSIBLE"


def test_observe_refuses_to_extend_a_broken_policy_file(world: World) -> None:
    write_policy(world, {"tools": {"create_charge": {"semantics": "MAYBE"}}})
    out = run_cli(world, *SEED_OBSERVE[1:])
    assert out.returncode == 2
    assert "create_charge" in out.stderr and "MAYBE" in out.stderr


# -- enforce: session boundary --------------------------------------------------------


async def test_session_clean_close_commits_and_undeclared_tools_never_reach_the_server(world: World) -> None:
    write_policy(world)
    async with connect(SEED_ENFORCE, world) as client:
        charge = await client.call_tool("create_charge", {"amount": 5, "customer": "acme"})
        with pytest.raises(McpError) as refused:
            await client.call_tool("delete_everything", {})
        docs = await client.call_tool("search_docs", {"query": "refunds"})
    assert structured(charge)["id"] == "ch_1"
    assert refused.value.error.code == -32001 and "delete_everything" in refused.value.error.message
    assert structured(docs) == {"hits": ["doc about refunds"]}
    assert world.called() == ["create_charge", "search_docs"]  # the server never saw the refused call
    assert world.charges()["ch_1"]["refunded"] is False  # a clean close commits
    refusals = [r["body"] for r in read_records(world.wal) if r["type"] == "STEP_REFUSED"]
    assert [(r["tool"], r["rule"]) for r in refusals] == [("delete_everything", "policy.unclassified")]
    types = types_of(world)
    assert types[0] == "SAGA_STARTED" and types[-1] == "SAGA_COMPLETED"
    assert "SAGA_ROLLED_BACK" not in types


async def test_the_log_may_be_a_server_log_url(world: World) -> None:
    # --wal-path takes what every verb's does: a file, or a server log's URL.
    base = os.environ.get("REDIS_URL")
    assert base, "REDIS_URL is not set: run `eval \"$(scripts/services env)\"` (Redis on 127.0.0.1:6399) first"
    name = f"mcp-proxy-{uuid.uuid4().hex}"
    url = f"{base}?log={name}"
    write_policy(world)
    try:
        async with connect([*SEED_ENFORCE[:2], "--wal-path", url, *SEED_ENFORCE[2:]], world) as client:
            await client.call_tool("create_charge", {"amount": 5, "customer": "acme"})
        log = RedisWAL(url, create=False)
        try:
            records = [(r["type"], r["body"].get("tool")) for r in log.records()]
        finally:
            log.close()
    finally:
        cleanup = redis.Redis.from_url(base)
        for key in cleanup.scan_iter(match=f"*{{{name}}}*"):
            cleanup.delete(key)
        cleanup.close()
    assert records[0][0] == "SAGA_STARTED" and records[-1][0] == "SAGA_COMPLETED"
    assert ("STEP_INTENT", "create_charge") in records and ("STEP_COMMITTED", None) in records
    assert not world.wal.exists()  # nothing went to the default file log
    assert world.called() == ["create_charge"]


async def test_a_tool_error_result_is_an_unknown_step_and_reaches_the_client_unchanged(world: World) -> None:
    write_policy(world)
    async with connect(SEED_ENFORCE, world) as client:
        result = await client.call_tool("create_charge", {"amount": -1, "customer": "acme"})
    assert error_flag(result)
    records = list(read_records(world.wal))
    unknown = [r for r in records if r["type"] == "STEP_UNKNOWN"]
    assert len(unknown) == 1 and unknown[0]["body"]["tool"] == "create_charge"
    assert records[-1]["type"] == "SAGA_COMPLETED" and records[-1]["body"]["unknown"] == [1]


async def test_policy_args_feed_the_gate_limits(world: World) -> None:
    write_policy(world)
    command = [*SEED_ENFORCE[:-4], "--gate", "saga_test_gates:budget", "--", "python", "-m", "my_mcp_server"]
    async with connect(command, world) as client:
        first = await client.call_tool("create_charge", {"amount": 6, "customer": "acme"})
        with pytest.raises(McpError) as refused:
            await client.call_tool("create_charge", {"amount": 6, "customer": "acme"})
    assert not error_flag(first)
    assert refused.value.error.code == -32002 and "mcp-spend" in refused.value.error.message
    assert world.called() == ["create_charge"]  # the refused charge never reached the server
    assert "STEP_REFUSED" in types_of(world)


async def test_a_dropped_connection_is_rolled_back_by_the_recovery_daemon(world: World) -> None:
    write_policy(world)
    world.configure_server("payments")  # the seed's command in this directory: the proxy records its name
    pidfile = world.root / "proxy.pid"
    # exec keeps the PID, so the file names the proxy process itself.
    command = ["bash", "-c", f'echo $$ > {pidfile}; exec {" ".join(SEED_ENFORCE)}']
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(connect(command, world))
        await client.call_tool("create_charge", {"amount": 3, "customer": "a"})
        await client.call_tool("search_docs", {"query": "x"})
        await client.call_tool("create_charge", {"amount": 4, "customer": "b"})
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        stack.push_async_exit(_ignore_errors)
    assert {c["refunded"] for c in world.charges().values()} == {False}
    assert "SAGA_COMPLETED" not in types_of(world)  # killed: nobody committed

    deadline = time.monotonic() + 60
    while True:  # the lease (1 s here) must expire before the daemon may touch the saga
        out = run_cli(world, "recover", "--wal-path", str(world.wal), "--import", "agent_saga_mcp.handler",
                      "--lease-grace", "0", "--retry-delay", "0.1")
        if "SAGA_ROLLED_BACK" in types_of(world) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert out.returncode == 0, out.stdout + out.stderr
    charges = world.charges()
    assert charges["ch_1"]["refunded"] and charges["ch_2"]["refunded"]
    refunds = [c for c in world.calls() if c["tool"] == "create_refund"]
    assert [r["args"]["charge"] for r in refunds] == ["ch_2", "ch_1"]  # newest first
    first_server = world.calls()[0]["pid"]
    assert all(r["pid"] != first_server for r in refunds)  # a fresh server, started by the daemon
    ended = [r for r in read_records(world.wal) if r["type"] == "SAGA_ROLLED_BACK"]
    assert ended[-1]["body"]["recovered"] is True and ended[-1]["body"]["clean"] is True
    undos = [r["body"]["compensation"]["kwargs"] for r in read_records(world.wal) if r["type"] == "STEP_COMMITTED"
             and r["body"].get("compensation")]
    assert {u["server"] for u in undos} == {"payments"}  # the log names the server; the host says how to run it


async def first_error(world: World, action: Any) -> Any:
    """The JSON-RPC error the proxy answers ``action`` with (it then stops, breaking the transport)."""
    caught: list[McpError] = []
    with contextlib.suppress(BaseException):
        async with connect(SEED_ENFORCE, world) as client:
            try:
                await action(client)
            except McpError as err:
                caught.append(err)
    assert caught, "the proxy answered without an error"
    return caught[0].error


async def _ignore_errors(*exc: Any) -> bool:
    return True  # the client's transport breaks when its server is killed; that is the point


# -- enforce: explicit and none ---------------------------------------------------------


@pytest.mark.parametrize("server", ["-- COMMAND", "--server NAME"])
async def test_explicit_boundary_adds_saga_tools_and_rolls_back_through_the_live_connection(
    world: World, server: str
) -> None:
    write_policy(world)
    command = [*SEED_ENFORCE[:-4], "--boundary", "explicit", "--", "python", "-m", "my_mcp_server"]
    if server == "--server NAME":  # the listed command runs, and undos are looked up by that name
        world.configure_server("payments")
        command = [*SEED_ENFORCE[:-4], "--boundary", "explicit", "--server", "payments"]
    async with connect(command, world) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        await client.call_tool("create_charge", {"amount": 2, "customer": "a"})
        committed = await client.call_tool("saga_commit", {})
        await client.call_tool("create_charge", {"amount": 3, "customer": "b"})
        await client.call_tool("search_docs", {"query": "x"})
        rolled = await client.call_tool("saga_rollback", {"reason": "the model changed its mind"})
        nothing = await client.call_tool("saga_rollback", {})
    assert names[-2:] == ["saga_commit", "saga_rollback"]
    assert "committed" in committed.content[0].text  # type: ignore[union-attr]
    assert "1 compensated" in rolled.content[0].text and not error_flag(rolled)  # type: ignore[union-attr]
    assert "nothing to do" in nothing.content[0].text  # type: ignore[union-attr]
    charges = world.charges()
    assert charges["ch_1"]["refunded"] is False and charges["ch_2"]["refunded"] is True
    refund = [c for c in world.calls() if c["tool"] == "create_refund"]
    assert len(refund) == 1 and refund[0]["pid"] == world.calls()[0]["pid"]  # same live server
    assert "saga_commit" not in world.called()  # handled by the proxy, never forwarded
    rolled_back = [r for r in read_records(world.wal) if r["type"] == "ROLLBACK_STARTED"]
    assert "the model changed its mind" in rolled_back[0]["body"]["cause"]
    undos = [r["body"]["compensation"]["kwargs"]["server"] for r in read_records(world.wal)
             if r["type"] == "STEP_COMMITTED" and r["body"].get("compensation")]
    assert undos == [None, None] if server == "-- COMMAND" else ["payments", "payments"]


async def test_an_undo_answered_with_an_error_result_is_a_failed_compensation_never_clean(world: World) -> None:
    # The refund names the customer where the charge id belongs: the server answers isError.
    write_policy(world, {**POLICY, "tools": {**POLICY["tools"], "create_charge": {
        "semantics": "COMPENSABLE", "compensate": {"tool": "create_refund", "args": {"charge": "$.customer"}}}}})
    command = [*SEED_ENFORCE[:-4], "--boundary", "explicit", "--", "python", "-m", "my_mcp_server"]
    async with connect(command, world) as client:
        await client.call_tool("create_charge", {"amount": 2, "customer": "acme"})
        rolled = await client.call_tool("saga_rollback", {"reason": "changed its mind"})
    said = rolled.content[0].text  # type: ignore[union-attr]
    assert "0 compensated, 1 failed" in said and "clean=False" in said and error_flag(rolled)
    assert world.charges()["ch_1"]["refunded"] is False
    refunds = [c["args"] for c in world.calls() if c["tool"] == "create_refund"]
    assert refunds == [{"charge": "acme"}] * COMPENSATION_RETRY.max_attempts  # each attempt failed: none counted
    records = list(read_records(world.wal))
    assert "STEP_COMPENSATED" not in [r["type"] for r in records]
    (ended,) = [r["body"] for r in records if r["type"] == "SAGA_ROLLED_BACK"]
    assert ended["clean"] is False


async def test_boundary_none_records_and_gates_but_never_rolls_back(world: World) -> None:
    write_policy(world)
    command = [*SEED_ENFORCE[:-4], "--boundary", "none", "--", "python", "-m", "my_mcp_server"]
    async with connect(command, world) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        await client.call_tool("create_charge", {"amount": 2, "customer": "a"})
        await client.call_tool("create_charge", {"amount": 3, "customer": "b"})
        with pytest.raises(McpError):
            await client.call_tool("delete_everything", {})
    assert "saga_rollback" not in names
    types = types_of(world)
    # One saga per call, the refused one included: its saga holds only the refusal.
    assert types.count("SAGA_STARTED") == 3 and types.count("SAGA_COMPLETED") == 3
    assert types.count("STEP_REFUSED") == 1
    assert "delete_everything" not in world.called()


# -- a policy that does not fit ----------------------------------------------------------


@pytest.mark.parametrize(("entry", "expected"), [
    ({"semantics": "MOSTLY_SAFE"}, "MOSTLY_SAFE"),
    ({"semantics": "COMPENSABLE", "compensate": {"tool": "create_refund", "args": {"charge": "$.id[x"}}},
     "$.id[x"),
    ({"semantics": "COMPENSABLE"}, "no 'compensate'"),
])
def test_a_broken_policy_is_refused_at_start_naming_the_entry(world: World, entry: Any, expected: str) -> None:
    write_policy(world, {"mode": "enforce", "tools": {"create_charge": entry}})
    out = run_cli(world, *SEED_ENFORCE[1:])
    assert out.returncode == 2, out.stderr
    assert "tools['create_charge']" in out.stderr and expected in out.stderr
    assert world.calls() == []


@pytest.mark.parametrize(("entry", "expected"), [
    ({"semantics": "COMPENSABLE", "compensate": {"tool": "void_charge", "args": {"charge": "$.id"}}},
     "'void_charge' is not a tool of this server"),
    ({"semantics": "COMPENSABLE", "compensate": {"tool": "create_refund", "args": {"charge_id": "$.id"}}},
     "'create_refund' does not take"),
    ({"semantics": "IRREVERSIBLE", "policy_args": {"spent": "$.amont"}}, "no field 'amont'"),
])
async def test_a_policy_that_does_not_fit_the_server_is_refused_at_the_first_tools_list(
    world: World, entry: Any, expected: str
) -> None:
    write_policy(world, {"mode": "enforce", "tools": {"create_charge": entry}})
    error = await first_error(world, lambda client: client.list_tools())
    assert "tools['create_charge']" in error.message and expected in error.message
    assert world.calls() == []


async def test_a_misfit_found_before_the_first_call_refuses_that_call(world: World) -> None:
    write_policy(world, {"mode": "enforce", "tools": {"create_charge": {
        "semantics": "COMPENSABLE", "compensate": {"tool": "void_charge", "args": {"charge": "$.id"}}}}})
    # The client never lists the tools: the proxy lists them by itself before the first call.
    error = await first_error(world, lambda client: client.call_tool("create_charge", {"amount": 1, "customer": "a"}))
    assert "void_charge" in error.message
    assert world.calls() == []  # the charge never happened: its undo could not have run
