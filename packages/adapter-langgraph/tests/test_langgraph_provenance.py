"""Issue 26 part 1 through LangGraph's real loop: the model reads the provenance refusal as a tool error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_saga_langgraph import wrap_tool
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph_drive import agent_graph, script

from agent_saga import ContextBroker, FileWAL, PreFlightGate, ProvenancePolicy, saga_scope

CHARGED: list[Any] = []


def charge(amount: int) -> str:
    """Charge the customer's card."""
    CHARGED.append(amount)
    return "ch_1"


def test_the_model_gets_the_refusal_and_its_reason_as_the_tool_result(tmp_path: Path) -> None:
    broker = ContextBroker()
    broker.add_document("invoice-17", "Invoice 17.\n\nTotal due: 4,200.00 EUR.")
    policy = ProvenancePolicy().require("charge", "amount", "SOURCED")
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    tool = wrap_tool(StructuredTool.from_function(charge), semantics="IRREVERSIBLE")
    graph = agent_graph(script([("charge", {"amount": 4200})]), [tool], handle_tool_errors=True)
    wal = FileWAL(tmp_path / "lg.wal")
    seen: dict[str, Any] = {}

    async def run() -> None:
        async with saga_scope(wal, gate=gate):
            seen.update(await graph.ainvoke({"messages": [HumanMessage("pay invoice 17")]}))

    # The framework turned the refusal into a tool message: the model reads why and may fetch the
    # source and try again. Nothing ran, so the saga (with no fail_on_swallowed) completes.
    asyncio.run(run())
    wal.close()
    assert CHARGED == []
    (answer,) = [m for m in seen["messages"] if isinstance(m, ToolMessage)]
    assert "refused by rule 'provenance'" in str(answer.content)
    assert "argument 'amount' must be SOURCED or higher, verified MODEL: untagged" in str(answer.content)
    refused = [r["body"] for r in wal.records() if r["type"] == "STEP_REFUSED"]
    assert [(b["tool"], b["rule"]) for b in refused] == [("charge", "provenance")]
    assert [r["type"] for r in wal.records()][-1] == "SAGA_COMPLETED"
