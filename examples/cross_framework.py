"""One saga across three agent frameworks that know nothing of each other.

    python examples/cross_framework.py

A CrewAI researcher reserves budget, a LangGraph writer publishes a draft, an AutoGen
reviewer sends the notification, and the notification service is down. Each agent
runs in its own framework's real loop (with a scripted model: no network, no key);
one saga boundary around the three unwinds the draft and the budget, newest first.
The "outside world" is a dict; the engine, the log and the compensations are real.
The log lands in ./cross-framework.wal.

Needs, from a clone: pip install -e ./packages/core -e './packages/adapter-crewai[crewai]'
-e './packages/adapter-langgraph[langgraph]' -e './packages/adapter-autogen[autogen]' 'autogen-ext>=0.6.2,<0.8'
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted, compensator, saga_scope
from agent_saga.log import read_records

# CrewAI reads these when it is imported (lazily, in researcher()): no telemetry, offline.
os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true", CREWAI_TRACING_ENABLED="false")

WORLD: dict[str, Any] = {"reservations": {}, "published": {}}
AGENT = {"reserve_budget": "research", "publish_draft": "writer", "notify": "reviewer"}


# -- the side effects, and their registered undos ------------------------------------------

def reserve_budget(amount: int) -> dict[str, Any]:
    """Reserve research budget."""
    WORLD["reservations"]["res_1"] = amount
    print("    [CrewAI]    reserved budget    -> res_1")
    return {"reservation_id": "res_1"}


@compensator("example.research.release")
def release(reservation_id: str) -> None:
    WORLD["reservations"].pop(reservation_id, None)


def publish_draft(title: str) -> dict[str, Any]:
    """Publish the draft."""
    WORLD["published"]["doc_1"] = title
    print("    [LangChain] published draft    -> doc_1")
    return {"doc_id": "doc_1"}


@compensator("example.writer.unpublish")
def unpublish(doc_id: str) -> None:
    WORLD["published"].pop(doc_id, None)


def notify(channel: str) -> str:
    """Notify the reviewers."""
    # The service refused the connection: nothing was sent, and the tool says so.
    raise NotApplied("notification service unreachable")


# -- three agents, three frameworks --------------------------------------------------------

def researcher() -> Any:
    from agent_saga_crewai import wrap_tool
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import tool

    class ScriptedLLM(BaseLLM):
        turn: int = 0

        def supports_function_calling(self) -> bool:
            return True

        def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
                 available_functions: Any = None, **kwargs: Any) -> Any:
            self.turn += 1
            if self.turn == 1:
                return [{"id": "c1", "type": "function",
                         "function": {"name": "reserve_budget", "arguments": '{"amount": 5000}'}}]
            return "budget reserved"

        async def acall(self, *args: Any, **kwargs: Any) -> Any:
            return self.call(*args, **kwargs)

    reserve = wrap_tool(tool(reserve_budget), semantics="COMPENSABLE", compensate=lambda r: Compensation(
        fn=release, handler="example.research.release", kwargs={"reservation_id": r["reservation_id"]}))
    agent = Agent(role="researcher", goal="fund the article", backstory="scripted", tools=[reserve],
                  llm=ScriptedLLM(model="scripted"), verbose=False)
    return Crew(agents=[agent], tasks=[Task(description="reserve budget", expected_output="a reservation",
                                            agent=agent)])


def writer() -> Any:
    from agent_saga_langgraph import wrap_tool
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = FakeMessagesListChatModel(responses=[
        AIMessage(content="", tool_calls=[{"name": "publish_draft", "args": {"title": "Q3"}, "id": "c1"}]),
        AIMessage(content="published"),
    ])
    publish = wrap_tool(StructuredTool.from_function(publish_draft), semantics="COMPENSABLE",
                        compensate=lambda r: Compensation(fn=unpublish, handler="example.writer.unpublish",
                                                          kwargs={"doc_id": r["doc_id"]}))

    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", think)
    graph.add_node("tools", ToolNode([publish]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def reviewer() -> Any:
    from agent_saga_autogen import wrap_tool
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, RequestUsage
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.replay import ReplayChatCompletionClient

    client = ReplayChatCompletionClient(
        [CreateResult(content=[FunctionCall(id="c1", name="notify", arguments='{"channel": "reviews"}')],
                      finish_reason="function_calls", usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                      cached=False),
         "notified"],
        model_info={"function_calling": True, "vision": False, "json_output": False, "family": "unknown",
                    "structured_output": False})
    # A sync tool: AutoGen runs it on an executor thread that drops the caller's context;
    # the wrapper carries the saga there.
    send = wrap_tool(FunctionTool(notify, description="Notify the reviewers."), semantics="IRREVERSIBLE")
    return AssistantAgent("reviewer", model_client=client, tools=[send], reflect_on_tool_use=True)


async def pipeline(wal: FileWAL) -> SagaAborted | None:
    from agent_saga_autogen import saga_run as autogen_run
    from agent_saga_crewai import saga_kickoff_async
    from agent_saga_langgraph import saga_run as langgraph_run
    from langchain_core.messages import HumanMessage

    try:
        async with saga_scope(wal, name="content-pipeline"):
            # Each run helper joins the saga that is already open: one transaction, three frameworks.
            await saga_kickoff_async(researcher())
            await langgraph_run(writer(), {"messages": [HumanMessage("write the Q3 draft")]})
            await autogen_run(reviewer(), task="tell the reviewers")
    except SagaAborted as aborted:
        return aborted
    return None


def main(workdir: Path) -> dict[str, Any]:
    """Run the pipeline with its log in ``workdir``; returns the state of the world."""
    path = workdir / "cross-framework.wal"
    path.unlink(missing_ok=True)  # this example's own log, fresh each run: it reads back only this run
    wal = FileWAL(path)
    aborted = asyncio.run(pipeline(wal))
    wal.close()
    records = list(read_records(path))
    if aborted is None:
        print("  the pipeline committed (unexpected in this example)")
        return WORLD
    cause: BaseException = aborted.cause
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    print(f"    [AutoGen]   FAILED: {cause}")
    print()
    print("  One boundary unwinds all three, last in first out:")
    tools = {r["step"]: r["body"]["tool"] for r in records if r["type"] == "STEP_INTENT"}
    not_applied = {r["step"] for r in records if r["type"] == "STEP_NOT_APPLIED"}
    for step in sorted(not_applied, reverse=True):
        print(f"    x  {AGENT[tools[step]]}.{tools[step]:<16} (never happened: nothing to undo)")
    for outcome in aborted.report.steps:
        print(f"    <- {AGENT[outcome.tool]}.{outcome.tool}")
    print(f"  rollback reported: {'clean' if aborted.report.clean else 'NOT CLEAN'}")
    print()
    print("  The log proves it was one transaction, not three:")
    print(f"    distinct saga ids : {len({r['saga'] for r in records})}")
    return WORLD


if __name__ == "__main__":
    world = main(Path.cwd())
    print()
    print("  world afterwards:", json.dumps(world))
