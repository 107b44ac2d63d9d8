"""The proxy in front of a reference server nobody on the project wrote: ``@modelcontextprotocol/server-memory``.

The server comes from npm, pinned by ``reference-servers/package-lock.json`` (``scripts/test``
runs ``npm ci --prefix packages/adapter-mcp/tests/reference-servers``), and keeps its
knowledge graph in the file ``$MEMORY_FILE_PATH``: every test reads that file, not only what
the client was told. The client is the ``mcp`` SDK's own, over stdio.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import McpError, World, connect, error_flag, structured, write_policy

from agent_saga.log import read_records

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).parent / "reference-servers"
MEMORY = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"

if shutil.which("node") is None or shutil.which("npm") is None:
    pytest.skip("node and npm are not on PATH: the reference MCP servers are npm packages run by node",
                allow_module_level=True)


@pytest.fixture
def memory(world: World) -> Path:
    """The server's knowledge-graph file for this test (the server creates it on its first write)."""
    assert MEMORY.is_file(), (
        "@modelcontextprotocol/server-memory is not installed: run "
        "`npm ci --prefix packages/adapter-mcp/tests/reference-servers` (scripts/test does this)")
    path = world.root / "memory.jsonl"
    world.env["MEMORY_FILE_PATH"] = str(path)
    return path


def names_in(memory: Path) -> list[str]:
    """The entities the server's own file holds."""
    if not memory.exists():
        return []
    records = [json.loads(line) for line in memory.read_text().splitlines() if line.strip()]
    return sorted(r["name"] for r in records if r.get("type") == "entity")


def proxy(*flags: str) -> list[str]:
    return ["agent-saga", "mcp", "--policy", "saga-policy.json", *flags, "--", "node", str(MEMORY)]


def policy(undo_args: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "enforce", "tools": {
        "create_entities": {"semantics": "COMPENSABLE",
                            "compensate": {"tool": "delete_entities", "args": undo_args}},
        "read_graph": {"semantics": "REVERSIBLE"},
        "search_nodes": {"semantics": "REVERSIBLE"},
        "open_nodes": {"semantics": "REVERSIBLE"},
        # Declared only so that the tests' failing call (an unknown entity) reaches the server.
        "add_observations": {"semantics": "REVERSIBLE", "description": "fails on an unknown entity"},
    }}


def entity(name: str) -> dict[str, Any]:
    return {"name": name, "entityType": "person", "observations": [f"{name} was here"]}


def text(result: Any) -> str:
    return " ".join(str(getattr(block, "text", "")) for block in result.content)


async def first_error(world: World, command: list[str], action: Callable[[Any], Awaitable[Any]]) -> Any:
    """The JSON-RPC error the proxy answers with, at ``initialize`` or at ``action`` (then it stops)."""
    try:
        async with connect(command, world) as client:
            await action(client)
    except BaseException as err:  # the transport breaks once the proxy stops: the error is inside
        found = _mcp_error(err)
        if found is None:
            raise AssertionError(f"the client got no JSON-RPC error, only {type(err).__name__}: {err}") from err
        return found.error
    raise AssertionError("the proxy answered without an error")


def _mcp_error(err: BaseException) -> McpError | None:
    if isinstance(err, McpError):
        return err
    for inner in err.exceptions if isinstance(err, BaseExceptionGroup) else ():
        found = _mcp_error(inner)
        if found is not None:
            return found
    return None


async def rolled_back_after_a_failure(world: World, calls: list[list[dict[str, Any]]]) -> Any:
    """Each ``create_entities`` call, then a call that fails, then ``saga_rollback``; its answer."""
    async with connect(proxy("--boundary", "explicit"), world) as client:
        for entities in calls:
            created = await client.call_tool("create_entities", {"entities": entities})
            assert not error_flag(created), text(created)
        failed = await client.call_tool(
            "add_observations", {"observations": [{"entityName": "nobody", "contents": ["x"]}]})
        assert error_flag(failed)  # the agent's next call fails, so it rolls the transaction back
        return await client.call_tool("saga_rollback", {"reason": "add_observations failed"})


async def test_create_entities_is_undone_by_delete_entities_with_every_created_name(
    world: World, memory: Path
) -> None:
    write_policy(world, policy({"entityNames": "$.entities[*].name"}))
    rolled = await rolled_back_after_a_failure(world, [[entity("ada"), entity("grace")]])
    assert names_in(memory) == []  # both gone from the server's own file
    assert "1 compensated, 0 failed" in text(rolled) and "clean=True" in text(rolled)
    assert not error_flag(rolled)
    (undo,) = [r["body"] for r in read_records(world.wal) if r["type"] == "STEP_COMMITTED"
               and r["body"].get("compensation")]
    assert undo["compensation"]["kwargs"]["arguments"] == {"entityNames": ["ada", "grace"]}


async def test_a_path_inside_a_list_is_resolved_never_sent_as_text(world: World, memory: Path) -> None:
    # The shape that produced a false clean: each call made one entity, the undo listed its name.
    write_policy(world, policy({"entityNames": ["$.entities[0].name"]}))
    rolled = await rolled_back_after_a_failure(world, [[entity("ada")], [entity("grace")]])
    assert names_in(memory) == []
    assert "2 compensated, 0 failed" in text(rolled) and "clean=True" in text(rolled)


async def test_the_undo_may_read_the_calls_own_arguments(world: World, memory: Path) -> None:
    write_policy(world, policy({"entityNames": "$args.entities[*].name"}))
    rolled = await rolled_back_after_a_failure(world, [[entity("ada"), entity("grace")]])
    assert names_in(memory) == []
    assert "1 compensated, 0 failed" in text(rolled) and "clean=True" in text(rolled)


@pytest.mark.parametrize(("names", "left"), [("$.entities[*].name", ["keep"]), ("$args.entities[*].name", [])])
async def test_the_answer_names_only_what_the_call_made_its_arguments_name_everything(
    world: World, memory: Path, names: str, left: list[str]
) -> None:
    write_policy(world, policy({"entityNames": names}))
    async with connect(proxy("--boundary", "explicit"), world) as client:
        await client.call_tool("create_entities", {"entities": [entity("keep")]})
        await client.call_tool("saga_commit", {})
        made = await client.call_tool("create_entities", {"entities": [entity("keep"), entity("ada")]})
        rolled = await client.call_tool("saga_rollback", {"reason": "changed its mind"})
    assert [e["name"] for e in structured(made)["entities"]] == ["ada"]  # "keep" existed: not made again
    assert "clean=True" in text(rolled)
    assert names_in(memory) == left


async def test_an_undo_whose_arguments_the_call_lacks_refuses_the_call_before_it_runs(
    world: World, memory: Path
) -> None:
    write_policy(world, policy({"entityNames": ["$args.entities[0].name", "$args.entities[1].name"]}))
    async with connect(proxy(), world) as client:
        with pytest.raises(McpError) as refused:
            await client.call_tool("create_entities", {"entities": [entity("ada")]})
    assert refused.value.error.code == -32002
    assert "compensate.args['entityNames'][1] = '$args.entities[1].name'" in refused.value.error.message
    assert names_in(memory) == []  # never made: its undo could not have been built
    (refusal,) = [r["body"] for r in read_records(world.wal) if r["type"] == "STEP_REFUSED"]
    assert (refusal["tool"], refusal["rule"]) == ("create_entities", "policy.compensate.args")


async def test_a_single_path_where_the_undo_takes_an_array_is_refused_at_start(world: World, memory: Path) -> None:
    write_policy(world, policy({"entityNames": "$.entities[0].name"}))
    error = await first_error(world, proxy(), lambda client: client.list_tools())
    assert "tools['create_entities'].compensate.args['entityNames'] = '$.entities[0].name'" in error.message
    assert "gives a string (per the outputSchema of 'create_entities')" in error.message
    assert "'delete_entities' takes an array" in error.message and "[*]" in error.message
    assert not memory.exists()  # refused before anything ran


async def test_an_array_where_the_undo_takes_strings_is_refused_at_start(world: World, memory: Path) -> None:
    write_policy(world, policy({"entityNames": "$.entities[*].observations"}))
    error = await first_error(world, proxy(), lambda client: client.call_tool(
        "create_entities", {"entities": [entity("ada")]}))
    assert "builds an array of an array" in error.message and "an array of a string" in error.message
    assert not memory.exists()  # the call never reached the server: its undo could not have run


async def test_a_path_that_cannot_be_read_refuses_the_policy_and_the_client_hears_why(
    world: World, memory: Path
) -> None:
    write_policy(world, policy({"entityNames": ["$.entities[0].name", "$.entities[one].name"]}))
    error = await first_error(world, proxy(), lambda client: client.list_tools())
    assert "tools['create_entities'].compensate.args['entityNames'][1]" in error.message
    assert "cannot read JSON path '$.entities[one].name'" in error.message
    assert not memory.exists()
