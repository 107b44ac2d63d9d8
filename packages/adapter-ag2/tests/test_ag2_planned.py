"""A reply's tool calls reach a Speculator through AG2's real conversation loop, sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ag2_drive import SCRIPTED, register
from agent_saga_ag2 import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from autogen import ConversableAgent
from autogen.testing import TestAgent, ToolCall
from autogen.testing.messages import tools_message
from autogen.tools import Tool

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def tools(self) -> list[Tool]:
        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        return [
            wrap_tool(Tool(func_or_tool=read_page), semantics="REVERSIBLE"),
            wrap_tool(
                Tool(func_or_tool=reserve),
                semantics="COMPENSABLE",
                compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]}),
            ),
        ]


class Counting:
    """The caller's own ``process_message_before_send`` hook."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, sender: Any, message: Any, recipient: Any, silent: Any) -> Any:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        self.seen.append(f"{sender.name}:{len(calls or [])} calls")
        return message


def agents(tools: list[Tool]) -> tuple[ConversableAgent, ConversableAgent]:
    """(executor, assistant), the tools registered as AG2 users do."""
    assistant = ConversableAgent("assistant", llm_config=SCRIPTED, human_input_mode="NEVER")
    executor = ConversableAgent("executor", llm_config=False, human_input_mode="NEVER")
    for tool in tools:
        register(tool, assistant, executor)
    return executor, assistant


# One reply asks for two reads and a reservation, then the assistant says "done".
REPLIES: list[Any] = [
    tools_message(ToolCall("read_page", page=1), ToolCall("read_page", page=2), ToolCall("reserve", seat=5)),
    "done",
]


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


def hooks(agent: ConversableAgent) -> list[Any]:
    return list(agent.hook_lists["process_message_before_send"])


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_reply_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = desk.tools()
    executor, assistant = agents(tools)
    assistant.register_hook("process_message_before_send", mine)
    given = (hooks(executor), hooks(assistant))
    chat: dict[str, Any] = {"max_turns": 2, "silent": True}
    with TestAgent(assistant, REPLIES):
        if run == "async":

            async def main() -> Speculator:
                async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                    await saga_run(executor, assistant, "go", **chat)
                return ahead

            ahead = asyncio.run(main())
        else:
            with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                saga_run_sync(executor, assistant, "go", **chat)
    # each body ran once per call: the reads on the speculator's threads, then redeemed
    assert sorted(desk.reads) == [1, 2] and desk.reserved == [5] and desk.released == []
    redeemed = records(wal, "SPECULATION_REDEEMED")
    assert sorted(r["body"]["tool"] for r in redeemed) == ["read_page", "read_page"]
    committed = {r["step"]: r["body"] for r in records(wal, "STEP_COMMITTED")}
    assert sorted(committed[r["step"]]["args"]["page"] for r in redeemed) == [1, 2]
    steps = {r["step"]: r["body"]["tool"] for r in wal.records() if r["type"].startswith("STEP_") and "tool" in r["body"]}
    assert sorted(steps.values()) == ["read_page", "read_page", "reserve"]
    # the COMPENSABLE call in the same reply was never run ahead
    assert ahead.stats.started == 2 and ahead.stats.redeemed == 2 and ahead.stats.wasted == 0
    assert ahead.stats.reasons == {"only a REVERSIBLE step may be speculated; 'reserve' is COMPENSABLE": 1}
    # the caller's own hook still ran on every message, and both agents' hooks are left as given
    assert mine.seen == ["assistant:3 calls", "assistant:0 calls"]
    assert (hooks(executor), hooks(assistant)) == given


def test_without_a_speculator_the_agents_are_left_as_given() -> None:
    from agent_saga_ag2._adapter import _planning

    executor, assistant = agents(Desk().tools())
    with _planning(executor, assistant):  # outside a saga
        assert hooks(executor) == hooks(assistant) == []
    with saga_scope(wal=MemoryWAL()), _planning(executor, assistant):
        assert hooks(executor) == hooks(assistant) == []
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"):
        with _planning(executor, assistant, assistant):
            assert [type(h) for h in hooks(executor) + hooks(assistant)] == [PlannedCalls, PlannedCalls]
        own = PlannedCalls()  # one the caller registered is used as it is, and stays
        assistant.register_hook("process_message_before_send", own)
        with _planning(executor, assistant):
            assert hooks(assistant) == [own]
    assert hooks(executor) == [] and hooks(assistant) == [own]


def test_the_hook_reads_tool_calls_and_a_legacy_function_call_and_returns_the_message() -> None:
    from agent_saga_ag2._adapter import _calls

    message = {
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_page", "arguments": '{"page": 1}'}},
            {"id": "b", "type": "function", "function": "not a function"},
            "not a call",
        ],
        "function_call": {"name": "reserve", "arguments": '{"seat": 5}'},
    }
    assert list(_calls(message)) == [("read_page", '{"page": 1}'), ("reserve", '{"seat": 5}')]
    assert list(_calls({"content": "text", "tool_calls": None})) == []
    assert PlannedCalls()(None, message, None, True) is message
    assert PlannedCalls()(None, "plain text", None, True) == "plain text"


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([Tool(func_or_tool=plain)])
