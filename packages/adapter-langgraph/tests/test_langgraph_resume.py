"""Issue 41, part 6: a LangGraph thread with a SqliteSaver checkpointer, killed inside its ToolNode, resumed.

The worker (``langgraph_thread.py``) runs the thread as a ``@durable`` entry point and is killed
with SIGKILL while the ToolNode books its third city (Paris and Rome booked and committed).
``agent-saga recover --import langgraph_thread`` then re-invokes the entry point under the same
saga id, which is the thread id: LangGraph resumes the thread from its checkpoint and re-runs the
ToolNode; agent-saga serves the two bookings it recorded and asks the world about the third.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_thread import graph

from agent_saga.log.file import read_records
from agent_saga.testing import World, kill_at, recover, wait_out_lease, world_env

pytestmark = pytest.mark.slow  # a worker process is killed

HERE = Path(__file__).parent


def test_a_thread_killed_in_its_tool_node_resumes_from_its_checkpoint_each_booking_once(tmp_path: Path) -> None:
    wal = tmp_path / "thread.wal"
    env = world_env(tmp_path, HERE)
    kill_at([sys.executable, str(HERE / "langgraph_thread.py"), str(wal), "book paris rome oslo"],
            {**env, "LG_HOLD_IN": "oslo"}, "booking oslo")
    world = World(tmp_path)
    assert world.seen("book") == {"paris": 1, "rome": 1}
    worker = world.pids()

    wait_out_lease()
    done = recover(wal, "langgraph_thread", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed 1" in done.stdout

    # The world: each city booked once across both processes, nothing cancelled. The checkpoint
    # held the model's first turn, so only the second was asked for after the crash; the resumer
    # booked only Oslo (its reconciler found it not booked).
    assert world.seen("book") == {"paris": 1, "rome": 1, "oslo": 1}
    assert not world.seen("cancel")
    assert world.seen("model") == {"turn 1": 1, "turn 2": 1}
    assert world.by_others(worker) == [("book", "oslo"), ("model", "turn 2")]

    # The thread: resumed, not restarted; its ToolNode answered all three calls once.
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        state = graph(saver).get_state({"configurable": {"thread_id": "thread-7"}})
    assert not state.next
    messages = state.values["messages"]
    assert sorted(m.tool_call_id for m in messages if isinstance(m, ToolMessage)) == [
        "call_oslo", "call_paris", "call_rome"]
    assert messages[-1].content == "booked"

    # The log: one run, resumed once, ended with the thread's answer; two steps served, one live.
    records = list(read_records(wal))
    types = [r["type"] for r in records]
    assert types.count("SAGA_STARTED") == 1 and types.count("SAGA_RESUMED") == 1
    assert types[-1] == "SAGA_COMPLETED" and records[-1]["body"]["result"] == "booked"
    assert "ROLLBACK_STARTED" not in types
    (answered,) = [r for r in records if r["type"] == "RECONCILE_ANSWERED"]  # Oslo, in flight at the kill
    assert answered["body"]["exists"] is False
    after = types.index("SAGA_RESUMED")
    assert [r["body"].get("args") for r in records[after:] if r["type"] == "STEP_INTENT"] == [{"city": "oslo"}]
