"""The README's LangGraph snippets, run as written against the real framework."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph_drive import agent_graph, script

from agent_saga import ActionSemantics, Compensation, FileWAL, SagaAborted, compensator

LEDGER: list[str] = []


@compensator("seed.stripe.refund")
def refund(charge_id: str, idempotency_key: str | None = None) -> None:
    LEDGER.append(f"refund {charge_id}")


@compensator("seed.k8s.scale_deployment")
def scale_back(deploy: str, replicas: int) -> None:
    LEDGER.append(f"scale {deploy} back to {replicas}")


@compensator("seed.qdrant.delete_points")
def delete_points(collection: str, ids: list[str]) -> None:
    LEDGER.append(f"delete {ids} from {collection}")


@compensator("seed.zendesk.close_ticket")
def close_ticket(ticket_id: str) -> None:
    LEDGER.append(f"close ticket {ticket_id}")


@tool
def stripe_charge_tool(amount: int) -> dict[str, Any]:
    """Charge the customer's card."""
    LEDGER.append(f"charge {amount}")
    return {"id": "ch_1", "amount": amount}


@tool
def k8s_scale_deployment(name: str, replicas: int) -> dict[str, Any]:
    """Scale a deployment."""
    LEDGER.append(f"scale {name} to {replicas}")
    return {"name": name, "previous_replicas": 2}


@tool
async def qdrant_upsert_points(collection: str, ids: list[str]) -> dict[str, Any]:
    """Upsert vectors into a collection."""
    LEDGER.append(f"upsert {ids} into {collection}")
    return {"collection": collection, "ids": ids}


@tool
def zendesk_create_ticket(subject: str) -> dict[str, Any]:
    """Open a support ticket."""
    raise ConnectionError("zendesk unreachable")


@pytest.fixture(autouse=True)
def _clean() -> None:
    LEDGER.clear()


def test_use_it_with_langgraph_snippet(tmp_path: Any) -> None:
    from agent_saga.adapters.langgraph import saga_run, wrap_tool

    charge = wrap_tool(stripe_charge_tool,          # same name, description, schema
                       semantics=ActionSemantics.COMPENSABLE,
                       compensate=lambda r: Compensation(
                           fn=refund, handler="seed.stripe.refund",
                           kwargs={"charge_id": r["id"]}))
    assert isinstance(charge, BaseTool)
    assert type(charge) is type(stripe_charge_tool)
    assert (charge.name, charge.description) == (stripe_charge_tool.name, stripe_charge_tool.description)

    @tool
    def fail_after(reason: str) -> str:
        """A node that fails."""
        raise RuntimeError(reason)

    graph = agent_graph(script([("stripe_charge_tool", {"amount": 4200}), ("fail_after", {"reason": "boom"})]),
                        [charge, fail_after])
    wal = FileWAL(tmp_path / "seed.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(graph, {"messages": [HumanMessage("...")]}, wal=wal))   # graph raises -> LIFO unwind
    assert LEDGER == ["charge 4200", "refund ch_1"]
    assert caught.value.report.clean
    wal.close()


def test_framework_adapters_devops_snippet(tmp_path: Any) -> None:
    from agent_saga.adapters.langgraph import saga_run, wrap_tool

    C = ActionSemantics.COMPENSABLE
    safe_scale = wrap_tool(
        k8s_scale_deployment, semantics=C,
        compensate=lambda r: Compensation(
            fn=scale_back, handler="seed.k8s.scale_deployment",
            kwargs={"deploy": r["name"], "replicas": r["previous_replicas"]}))
    safe_upsert = wrap_tool(
        qdrant_upsert_points, semantics=C,
        compensate=lambda r: Compensation(
            fn=delete_points, handler="seed.qdrant.delete_points",
            kwargs={"collection": r["collection"], "ids": r["ids"]}))
    safe_ticket = wrap_tool(
        zendesk_create_ticket, semantics=C,
        compensate=lambda r: Compensation(
            fn=close_ticket, handler="seed.zendesk.close_ticket",
            kwargs={"ticket_id": r["id"]}))
    graph = agent_graph(script([
        ("k8s_scale_deployment", {"name": "api", "replicas": 5}),
        ("qdrant_upsert_points", {"collection": "docs", "ids": ["p1", "p2"]}),
        ("zendesk_create_ticket", {"subject": "scaled api"}),
    ]), [safe_scale, safe_upsert, safe_ticket])
    wal = FileWAL(tmp_path / "devops.wal")
    with pytest.raises(SagaAborted) as caught:
        asyncio.run(saga_run(graph, {"messages": [HumanMessage("scale and index")]}, wal=wal))
    # if any node raises, every tool that already ran is compensated LIFO
    assert LEDGER == [
        "scale api to 5", "upsert ['p1', 'p2'] into docs",
        "delete ['p1', 'p2'] from docs", "scale api back to 2",
    ]
    assert [s.tool for s in caught.value.report.compensated] == ["qdrant_upsert_points", "k8s_scale_deployment"]
    assert isinstance(caught.value.cause, ConnectionError)
    wal.close()


def test_the_namespace_import_is_the_top_level_module() -> None:
    import agent_saga_langgraph

    from agent_saga.adapters import langgraph

    assert langgraph is agent_saga_langgraph
    assert langgraph.__spec__ is not None
    assert langgraph.__spec__.name == "agent_saga_langgraph"
