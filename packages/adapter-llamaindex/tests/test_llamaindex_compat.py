"""The workflow Context, callbacks, the hook, and what the adapter takes from LlamaIndex beyond its API (_compat)."""

# No ``from __future__ import annotations`` here: LlamaIndex recognises a Context
# parameter by its annotation object, so the tools below must carry the class itself.
import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_saga_llamaindex import saga_run, wrap_tool
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from test_llamaindex_conformance import pytestmark, scripted  # noqa: F401 - the framework's own warnings

from agent_saga import FileWAL
from agent_saga.testing import Call, assert_moved_fails_at_import, assert_wrap_tool_hook

SEEN: list[Any] = []


def remember(ctx: Context, note: str) -> dict[str, str]:
    """Write a note to the agent's memory."""
    SEEN.append((type(ctx).__name__, note))
    return {"ref": note}


def lookup(topic: str) -> dict[str, str]:
    """Look a topic up."""
    return {"topic": topic}


def test_the_workflow_context_reaches_the_function_but_not_the_log(tmp_path: Path) -> None:
    SEEN.clear()
    tool = FunctionTool.from_defaults(remember)
    safe = wrap_tool(tool, semantics="REVERSIBLE")
    assert (safe.ctx_param_name, safe.metadata.get_parameters_dict()) == ("ctx", tool.metadata.get_parameters_dict())
    wal = FileWAL(tmp_path / "ctx.wal")
    agent = FunctionAgent(tools=[safe], llm=scripted([Call("remember", {"note": "x"})]))
    asyncio.run(saga_run(agent, user_msg="go", wal=wal))
    assert SEEN == [("Context", "x")]
    step = next(r["body"] for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert (step["tool"], step["args"]) == ("remember", {"note": "x"})
    wal.close()


def test_the_callbacks_of_the_tool_still_run_with_the_functions_own_result(tmp_path: Path) -> None:
    raw: list[Any] = []

    def sync_seen(result: Any) -> str:
        raw.append(("sync", result))
        return "looked up"

    async def async_seen(result: Any) -> str:
        raw.append(("async", result))
        return "looked up"

    for callbacks in ({"callback": sync_seen}, {"async_callback": async_seen}):
        safe = wrap_tool(FunctionTool.from_defaults(lookup, **callbacks), semantics="REVERSIBLE")
        agent = FunctionAgent(tools=[safe], llm=scripted([Call("lookup", {"topic": "q3"})]))
        asyncio.run(saga_run(agent, user_msg="go", wal=FileWAL(tmp_path / f"{len(raw)}.wal")))
    # FunctionAgent awaits acall: a sync-only callback runs there through LlamaIndex's own bridge
    assert raw == [("sync", {"topic": "q3"}), ("async", {"topic": "q3"})]


def test_wrap_tool_names_what_it_takes_and_wraps_once() -> None:
    with pytest.raises(TypeError, match=r"FunctionTool.*got builtins.function; make one with FunctionTool.from_defaults"):
        wrap_tool(lookup, semantics="REVERSIBLE")
    safe = wrap_tool(FunctionTool.from_defaults(lookup), semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_tool(safe, semantics="REVERSIBLE")


def test_the_wrap_tool_hook_and_the_namespace_import() -> None:
    import agent_saga_llamaindex

    from agent_saga.adapters import llamaindex

    assert llamaindex is agent_saga_llamaindex
    tool = FunctionTool.from_defaults(lookup)
    wrapped = assert_wrap_tool_hook("llamaindex", tool, "research.lookup", name="research.lookup")
    assert wrapped.metadata is tool.metadata


def test_an_install_whose_llamaindex_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_llamaindex", "from llama_index.core.tools import FunctionTool; rename_on_init(FunctionTool, '_callback', '_async_callback')",
                                 "llama-index-core<0.15,>=0.14.22 (installed: llama-index-core 0.14", "no longer keeps a FunctionTool's callbacks in _callback/_async_callback")
