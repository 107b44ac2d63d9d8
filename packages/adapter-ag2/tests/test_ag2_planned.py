"""A reply's tool calls reach a Speculator through AG2's real conversation loop, sync and async."""

from __future__ import annotations

from typing import Any

import pytest
from ag2_drive import SCRIPTED, register
from agent_saga_ag2 import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from autogen import ConversableAgent
from autogen.testing import TestAgent, ToolCall
from autogen.testing.messages import tools_message
from autogen.tools import Tool

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import Desk, check_redeemed, run_ahead


def wrapped(desk: Desk) -> list[Tool]:
    """The desk's two functions as AG2 tools, wrapped."""
    return desk.tools(wrap_tool, lambda fn: Tool(func_or_tool=fn))


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


def hooks(agent: ConversableAgent) -> list[Any]:
    return list(agent.hook_lists["process_message_before_send"])


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_reply_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = wrapped(desk)
    executor, assistant = agents(tools)
    assistant.register_hook("process_message_before_send", mine)
    given = (hooks(executor), hooks(assistant))
    chat: dict[str, Any] = {"max_turns": 2, "silent": True}
    with TestAgent(assistant, REPLIES):
        ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(executor, assistant, "go", **chat),
                          go_sync=lambda: saga_run_sync(executor, assistant, "go", **chat))
    check_redeemed(wal, ahead, desk)
    # the caller's own hook still ran on every message, and both agents' hooks are left as given
    assert mine.seen == ["assistant:3 calls", "assistant:0 calls"]
    assert (hooks(executor), hooks(assistant)) == given


def test_without_a_speculator_the_agents_are_left_as_given() -> None:
    from agent_saga_ag2._adapter import _planning

    executor, assistant = agents(wrapped(Desk()))
    with _planning(executor, assistant):  # outside a saga
        assert hooks(executor) == hooks(assistant) == []
    with saga_scope(wal=MemoryWAL()), _planning(executor, assistant):
        assert hooks(executor) == hooks(assistant) == []
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"):
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
