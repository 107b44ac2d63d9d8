"""``wrap_tool`` / ``wrap_session`` over the SDK's own client: ``ClientSession`` on mcp 1.x,
``Client`` on mcp 2.x (each tox env runs this file with its major version), connected in
memory to the real test server (``my_mcp_server``, which keeps its world in files).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_saga_mcp import MCP_MAJOR, ToolErrorResult, wrap_session, wrap_tool
from conftest import World, error_flag

from agent_saga import ActionSemantics, Compensation, SagaAborted, StepOptions, saga_scope
from agent_saga.errors import BoundaryRequired
from agent_saga.log import MemoryWAL
from agent_saga.plugins import PolicyError, ToolNotClassified
from agent_saga.semantics import Outcome
from agent_saga.testing import every_step_option, spy_on_steps

POLICY: dict[str, Any] = {
    "mode": "enforce",
    "tools": {
        "create_charge": {"semantics": "COMPENSABLE",
                          "compensate": {"tool": "create_refund", "args": {"charge": "$.id"}}},
        "search_docs": {"semantics": "REVERSIBLE"},
    },
}


@asynccontextmanager
async def sdk_client(world: World, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setenv("MY_MCP_WORLD", str(world.dir))
    import my_mcp_server

    if MCP_MAJOR >= 2:
        from mcp import Client  # type: ignore[attr-defined]

        async with Client(my_mcp_server.server) as client:
            yield client
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(my_mcp_server.server._mcp_server) as session:
            yield session


def expected_client_type() -> str:
    return "Client" if MCP_MAJOR >= 2 else "ClientSession"


@pytest.mark.parametrize("form", ["keywords", "options"])
async def test_a_failing_run_undoes_wrapped_calls_newest_first(
    world: World, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    async with sdk_client(world, monkeypatch) as client:
        assert type(client).__name__ == expected_client_type()

        async def refund(charge: str) -> None:
            assert not error_flag(await client.call_tool("create_refund", {"charge": charge}))

        def undo(doc: Any) -> Compensation:  # gets the result document, whichever way it is given
            return Compensation(fn=refund, kwargs={"charge": doc["id"]})

        if form == "keywords":
            charge = wrap_tool(client, "create_charge", semantics=ActionSemantics.COMPENSABLE, compensate=undo)
        else:
            charge = wrap_tool(client, "create_charge", options=StepOptions("COMPENSABLE", compensate=undo))
        wal = MemoryWAL()
        with pytest.raises(SagaAborted) as aborted:
            async with saga_scope(wal=wal):
                await charge({"amount": 5, "customer": "a"})
                await charge({"amount": 7, "customer": "b"})
                raise RuntimeError("the agent gave up")
    report = aborted.value.report
    assert [s.outcome for s in report.steps] == [Outcome.COMPENSATED, Outcome.COMPENSATED]
    assert [c["args"]["charge"] for c in world.calls() if c["tool"] == "create_refund"] == ["ch_2", "ch_1"]
    assert all(c["refunded"] for c in world.charges().values())


async def test_an_error_result_fails_the_step_as_unknown(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    async with sdk_client(world, monkeypatch) as client:
        session = wrap_session(client, POLICY)
        with pytest.raises(SagaAborted) as aborted:
            async with saga_scope(wal=MemoryWAL()):
                await session.call_tool("create_charge", {"amount": 4, "customer": "a"})
                await session.call_tool("create_charge", {"amount": -4, "customer": "a"})
    assert isinstance(aborted.value.cause, ToolErrorResult)
    assert "amount must be positive" in str(aborted.value.cause) or MCP_MAJOR >= 2
    states = [(s.tool, s.outcome) for s in aborted.value.report.steps]
    assert states[0][0] == "create_charge" and states[0][1] is not Outcome.COMPENSATED  # the failed one
    assert states[1] == ("create_charge", Outcome.COMPENSATED)  # the good one, undone via create_refund
    assert world.charges()["ch_1"]["refunded"] is True


async def test_wrap_session_refuses_undeclared_tools_before_the_server(world: World,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async with sdk_client(world, monkeypatch) as client:
        session = wrap_session(client, POLICY)
        with pytest.raises(SagaAborted) as aborted:
            async with saga_scope(wal=MemoryWAL()):
                await session.call_tool("search_docs", {"query": "q"})
                await session.call_tool("delete_everything", {})
        assert isinstance(aborted.value.cause, ToolNotClassified)
        outside = await session.call_tool("delete_everything", {})  # outside a saga: straight through
        assert (await session.list_tools()).tools  # every other attribute is the client's
    assert not error_flag(outside)
    assert world.called() == ["search_docs", "delete_everything"]  # once, outside the saga


async def test_outside_a_saga_calls_go_straight_through_unless_a_boundary_is_required(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sdk_client(world, monkeypatch) as client:
        loose = wrap_tool(client, "create_charge", semantics="IRREVERSIBLE")
        strict = wrap_tool(client, "create_charge", semantics="IRREVERSIBLE", require_boundary=True)
        result = await loose({"amount": -1, "customer": "a"})
        with pytest.raises(BoundaryRequired):
            await strict({"amount": 1, "customer": "a"})
    assert error_flag(result)  # no saga: the error result is returned, not raised
    assert world.called() == ["create_charge"]


async def test_with_server_the_undo_is_recorded_as_the_recoverable_handler(world: World,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    async with sdk_client(world, monkeypatch) as client:
        session = wrap_session(client, POLICY, server="payments")
        wal = MemoryWAL()
        with pytest.raises(SagaAborted):
            async with saga_scope(wal=wal):
                await session.call_tool("create_charge", {"amount": 4, "customer": "a"})
                raise RuntimeError("stop")
    committed = [r for r in wal.records() if r["type"] == "STEP_COMMITTED"]
    comp = committed[0]["body"]["compensation"]
    assert comp["handler"] == "mcp.call_tool" and comp["recoverable"] is True
    assert comp["kwargs"]["tool"] == "create_refund" and comp["kwargs"]["arguments"] == {"charge": "ch_1"}
    assert comp["kwargs"]["server"] == "payments"  # a name the recovery host configures, never a command
    # Undone in process through the live client, not by starting the server command.
    assert world.charges()["ch_1"]["refunded"] is True
    assert len({c["pid"] for c in world.calls()}) == 1


async def test_wrap_session_builds_each_calls_undo_from_that_calls_arguments(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Contrived on purpose: a "search" whose undo refunds the charge it names. Two calls of one
    # wrapped tool, two different undos: nothing of the first call's arguments is kept for the next.
    policy = {"mode": "enforce", "tools": {
        "create_charge": {"semantics": "IRREVERSIBLE"},
        "search_docs": {"semantics": "COMPENSABLE",
                        "compensate": {"tool": "create_refund", "args": {"charge": "$args.query"}}}}}
    async with sdk_client(world, monkeypatch) as client:
        session = wrap_session(client, policy)
        await session.call_tool("create_charge", {"amount": 1, "customer": "a"})
        await session.call_tool("create_charge", {"amount": 2, "customer": "b"})
        with pytest.raises(SagaAborted) as aborted:
            async with saga_scope(wal=MemoryWAL()):
                await session.call_tool("search_docs", {"query": "ch_1"})
                await session.call_tool("search_docs", {"query": "ch_2"})
                raise RuntimeError("stop")
        with pytest.raises(SagaAborted) as refused:
            async with saga_scope(wal=(wal := MemoryWAL())):
                await session.call_tool("search_docs", {"q": "ch_1"})
    assert aborted.value.report.clean
    assert [c["args"]["charge"] for c in world.calls() if c["tool"] == "create_refund"] == ["ch_2", "ch_1"]
    assert "compensate.args['charge'] = '$args.query' does not resolve" in str(refused.value.cause)
    assert world.called().count("search_docs") == 2  # the call whose undo could not be built never ran
    (record,) = [r["body"] for r in wal.records() if r["type"] == "STEP_REFUSED"]
    assert record["rule"] == "policy.compensate.args"


def test_wrapping_something_that_is_not_a_client_is_refused() -> None:
    with pytest.raises(TypeError, match="call_tool"):
        wrap_tool(object(), "x", semantics="REVERSIBLE")
    with pytest.raises(TypeError, match="call_tool"):
        wrap_session(object(), POLICY)


async def test_wrap_session_takes_a_server_name_never_a_command(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server= of earlier versions was the command, which the log then carried to the daemon.
    async with sdk_client(world, monkeypatch) as client:
        for command in (["python", "-m", "my_mcp_server"], "/bin/sh -c touch", "../x"):
            with pytest.raises(PolicyError, match="never the command"):
                wrap_session(client, POLICY, server=command)  # type: ignore[arg-type]


OPTIONS = every_step_option(policy_args={"asked": "$.query"})


async def test_wrap_tool_takes_every_step_option_and_hands_it_to_the_engine(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_on_steps(monkeypatch)
    async with sdk_client(world, monkeypatch) as client:
        docs = wrap_tool(client, "search_docs", semantics="COMPENSABLE", **OPTIONS)
        plain = wrap_tool(client, "search_docs", options=StepOptions("REVERSIBLE"))
        wal = MemoryWAL()
        async with saga_scope(wal=wal):
            await docs({"query": "q"})
            await plain({"query": "r"})
    mine, theirs = seen
    for name, value in OPTIONS.items():
        got = getattr(mine, name)
        if name == "fallback_action":  # bound to the call's arguments
            assert got.func is value and got.args == ({"query": "q"},)
            continue
        assert got == value, f"wrap_tool lost option {name}: {got!r}"
    assert theirs.origin == "mcp"  # the origin, unless one is given
    intents = [r["body"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    assert intents[0]["args"] == {"query": "q", "asked": "q"} and intents[0]["origin"] == "probe"
    committed = [r["body"] for r in wal.records() if r["type"] == "STEP_COMMITTED"]
    assert committed[-1]["origin"] == "mcp"  # a REVERSIBLE step says what ran in its commit record


async def test_an_undeclared_tool_refused_by_wrap_session_is_on_record(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sdk_client(world, monkeypatch) as client:
        session = wrap_session(client, POLICY)
        wal = MemoryWAL()
        with pytest.raises(SagaAborted):
            async with saga_scope(wal=wal):
                await session.call_tool("delete_everything", {"everything": True})
    (refusal,) = [r["body"] for r in wal.records() if r["type"] == "STEP_REFUSED"]
    assert (refusal["tool"], refusal["rule"], refusal["origin"]) == ("delete_everything", "policy.unclassified", "mcp")
    assert refusal["args"] == {"everything": True}
    assert world.called() == []
