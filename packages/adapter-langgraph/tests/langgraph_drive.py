"""Drive LangGraph's real agent loop (model node + ToolNode + tools_condition) offline."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

__all__ = ["ScriptedModel", "agent_graph", "script"]


class ScriptedModel(FakeMessagesListChatModel):
    """Replays AI messages in order; tools are bound by the graph, not by the model."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def script(calls: list[tuple[str, dict[str, Any]]], *, together: bool = False) -> ScriptedModel:
    """One AI message per call, or (``together``) one AI message carrying every call."""
    requests = [{"name": name, "args": args, "id": f"call_{i}"} for i, (name, args) in enumerate(calls)]
    turns: list[BaseMessage] = (
        [AIMessage(content="", tool_calls=requests)] if together
        else [AIMessage(content="", tool_calls=[request]) for request in requests]
    )
    turns.append(AIMessage(content="done"))
    return ScriptedModel(responses=turns)


def agent_graph(model: BaseChatModel, tools: list[Any], *, handle_tool_errors: bool = False,
                checkpointer: Any = None) -> Any:
    """The standard LangGraph tool-calling loop (``checkpointer``: where its threads are checkpointed)."""

    def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def athink(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", RunnableLambda(think, afunc=athink))
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)
