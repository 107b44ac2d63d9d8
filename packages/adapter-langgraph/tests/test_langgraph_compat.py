"""What the adapter takes from LangChain beyond its documented API (_compat), through the real loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

from agent_saga_langgraph import saga_run, wrap_tool
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph_drive import agent_graph, script

from agent_saga import FileWAL

RECEIVED: list[tuple[str, Any]] = []


@tool
def book(
    room: str, config: RunnableConfig, tool_call_id: Annotated[str, InjectedToolCallId], callbacks: Any = None
) -> str:
    """Book a meeting room."""
    RECEIVED.append((room, (sorted(config)[:1], tool_call_id, type(callbacks).__name__)))
    return f"booked {room}"


def test_values_langchain_injects_reach_the_function_but_not_the_log(tmp_path: Path) -> None:
    RECEIVED.clear()
    safe = wrap_tool(book, semantics="REVERSIBLE")
    assert safe.tool_call_schema.model_json_schema() == book.tool_call_schema.model_json_schema()
    wal = FileWAL(tmp_path / "injected.wal")
    graph = agent_graph(script([("book", {"room": "blue"})]), [safe])
    asyncio.run(saga_run(graph, {"messages": [HumanMessage("book it")]}, wal=wal))
    # The config, the call id and the callbacks arrived ...
    assert RECEIVED == [("blue", (["callbacks"], "call_0", "CallbackManager"))]
    step = next(r["body"] for r in wal.records() if r["type"] == "STEP_COMMITTED")
    assert step["tool"] == "book" and step["args"] == {"room": "blue"}  # ... and stayed out of the log
    wal.close()


def test_an_install_whose_langchain_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from langchain_core.tools import StructuredTool
        del StructuredTool._run          # what a refactor of langchain-core could do
        try:
            import agent_saga_langgraph
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-langgraph supports ")
    assert "langgraph<1.3,>=1.1.5" in out and "langchain-core<1.9,>=1.2.5" in out and "(installed: langchain-core 1." in out
    assert "StructuredTool / Tool no longer have func/coroutine fields, or their own _run / _arun(*args, " in out
    assert "pip install 'agent-saga-langgraph[langgraph]>=3.0.0.dev0'" in out
