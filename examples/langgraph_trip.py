"""A LangGraph agent books a trip; the card is declined; the bookings are undone.

    python examples/langgraph_trip.py

The trip's tools and their undos are in trip.py. Here they become LangChain tools, ``wrap_tool``
declares what each one is, and ``saga_run`` makes the graph run one transaction. The graph is
LangGraph's tool-calling loop (a model node, a ``ToolNode``, ``tools_condition``); the model is
LangChain's ``FakeMessagesListChatModel`` answering with scripted tool calls (no network, no key):
with a key, call ``ChatOpenAI(model=...).bind_tools(tools)`` in ``agent`` instead. The log lands in
./langgraph-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-langgraph[langgraph]'
"""

import asyncio
from pathlib import Path

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.langgraph import saga_run, wrap_tool

tools = [
    wrap_tool(tool(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
    wrap_tool(tool(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
    wrap_tool(tool(charge_card), semantics="IRREVERSIBLE"),
]
model = FakeMessagesListChatModel(responses=[
    *(AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{i}"}]) for i, (name, args) in enumerate(CALLS)),
    AIMessage(SUMMARY),
])


async def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()


async def main() -> None:
    Path("langgraph-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("langgraph-trip.wal")
    try:
        await saga_run(graph, {"messages": [HumanMessage(PROMPT)]}, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
