"""What AG2 hands a tool besides the model's arguments, renamed registrations, and where the adapter is found."""

# No `from __future__ import annotations`: AG2 finds ChatContext parameters by their evaluated annotation.

from pathlib import Path
from typing import Any

import pytest
from ag2_drive import pair
from agent_saga_ag2 import saga_run_sync, wrap_tool
from autogen import register_function
from autogen.tools import Tool
from autogen.tools.dependency_injection import ChatContext

import agent_saga
from agent_saga import FileWAL, patch_all, unpatch_all
from agent_saga.testing import assert_moved_fails_at_import

SEEN: list[Any] = []


def note(text: str, context: ChatContext) -> dict[str, str]:
    """Write a note for the reviewers."""
    SEEN.append((text, type(context).__name__, len(context.chat_messages)))
    return {"ref": text}


@pytest.fixture(autouse=True)
def _clean() -> Any:
    SEEN.clear()
    unpatch_all()
    yield
    unpatch_all()


def _steps(wal: FileWAL) -> list[tuple[str, Any]]:
    return [(r["body"]["tool"], r["body"]["args"]) for r in wal.records() if r["type"] == "STEP_COMMITTED"]


def _chat(tools: list[Tool], calls: list[tuple[str, dict[str, Any]]], wal: FileWAL) -> None:
    with pair(tools, calls) as (executor, assistant):
        saga_run_sync(executor, assistant, "go", max_turns=len(calls) + 1, silent=True, wal=wal)


def test_the_chat_context_reaches_the_function_but_not_the_log_nor_the_schema(tmp_path: Path) -> None:
    tool = Tool(func_or_tool=note)
    safe = wrap_tool(tool, semantics="REVERSIBLE")
    assert safe.tool_schema == tool.tool_schema
    assert "context" not in safe.tool_schema["function"]["parameters"]["properties"]
    wal = FileWAL(tmp_path / "context.wal")
    _chat([safe], [("note", {"text": "hi"})], wal)
    assert SEEN == [("hi", "ChatContext", 1)]  # the executor's chat with the assistant
    assert _steps(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_under_patch_all_the_chat_context_stays_out_of_the_log_too(tmp_path: Path) -> None:
    patch_all({"mode": "enforce", "tools": {"note": {"semantics": "REVERSIBLE"}}})
    wal = FileWAL(tmp_path / "patched.wal")
    _chat([Tool(func_or_tool=note)], [("note", {"text": "hi"})], wal)
    assert [s for s, *_ in SEEN] == ["hi"]
    assert _steps(wal) == [("note", {"text": "hi"})]
    wal.close()


def test_a_tool_registered_under_a_new_name_is_one_step_by_that_name(tmp_path: Path) -> None:
    # register_function copies the tool (Tool(func_or_tool=tool, name=...)): the copy of a
    # policed function is policed once, by the copy's name; a wrapped tool stays one step.
    patch_all({"mode": "enforce", "tools": {"memo": {"semantics": "REVERSIBLE"}}})
    wal = FileWAL(tmp_path / "renamed.wal")

    def as_memo(tool: Tool, assistant: Any, executor: Any) -> None:
        register_function(tool, caller=assistant, executor=executor, name="memo", description="A memo.")

    for tool in (Tool(func_or_tool=note), wrap_tool(Tool(func_or_tool=note), semantics="REVERSIBLE", name="memo")):
        with pair([tool], [("memo", {"text": "x"})], as_memo) as (executor, assistant):
            saga_run_sync(executor, assistant, "go", max_turns=2, silent=True, wal=wal)
    assert _steps(wal) == [("memo", {"text": "x"}), ("memo", {"text": "x"})]
    assert len(SEEN) == 2
    wal.close()


def test_wrap_tool_names_the_framework_module_it_takes() -> None:
    with pytest.raises(TypeError, match=r"agent-saga-ag2's wrap_tool takes autogen\.tools\.tool\.Tool, got builtins\.int"):
        wrap_tool(3, semantics="REVERSIBLE")  # type: ignore[type-var]
    Foreign = type("Toolish", (), {"__module__": "autogen.tools.toolish"})
    with pytest.raises(TypeError, match=r"agent-saga-ag2's wrap_tool takes autogen\.tools\.tool\.Tool, got autogen\.tools\.toolish\.Toolish"):
        agent_saga.wrap_tool(Foreign(), semantics="REVERSIBLE")
    # Microsoft's line keeps its own adapter (not installed here).
    Microsoft = type("FunctionTool", (), {"__module__": "autogen_core.tools"})
    with pytest.raises(TypeError, match=r"pip install 'agent-saga-autogen\[autogen\]>=3\.0\.0'"):
        agent_saga.wrap_tool(Microsoft(), semantics="REVERSIBLE")


def test_an_install_whose_ag2_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_ag2", "from autogen import ConversableAgent; del ConversableAgent._run_async_in_thread",
                                 "ag2<0.15,>=0.12.0 (installed: ag2 0.14.", "no longer has Tool._func, Tool._chat_context_param_names or ConversableAgent._run_async_in_thread")
