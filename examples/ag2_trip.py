"""An AG2 assistant books a trip through its executor; the card is declined; the bookings are undone.

    python examples/ag2_trip.py

The trip's tools and their undos are in trip.py. Here they become AG2 ``Tool``s, ``wrap_tool``
declares what each one is, and the wrapped tools are registered as usual: for the assistant's
model to call, for the executor to run. ``saga_run_sync`` makes ``initiate_chat`` one
transaction. AG2 hands the declined charge back as an ``Error: ...`` reply and the chat goes on;
the helper then fails the run, so nothing booked stays booked. The assistant's replies are
scripted with AG2's own ``autogen.testing.TestAgent`` (no network, no key): with a key, give the
assistant a real ``llm_config`` and drop the ``TestAgent``. The log lands in ./ag2-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-ag2[ag2]'
"""

from pathlib import Path

from autogen import ConversableAgent
from autogen.testing import TestAgent, ToolCall
from autogen.tools import Tool
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.ag2 import saga_run_sync, wrap_tool

# An LLM config naming a client that TestAgent stands in for (nothing is ever sent).
assistant = ConversableAgent("assistant", human_input_mode="NEVER",
                             llm_config={"config_list": [{"model": "scripted", "model_client_cls": "Scripted"}]})
executor = ConversableAgent("executor", llm_config=False, human_input_mode="NEVER")
for safe in (wrap_tool(Tool(func_or_tool=hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
             wrap_tool(Tool(func_or_tool=book_hotel), semantics="COMPENSABLE", compensate=room_undo),
             wrap_tool(Tool(func_or_tool=charge_card), semantics="IRREVERSIBLE")):
    safe.register_for_llm(assistant)
    safe.register_for_execution(executor)


def main() -> None:
    Path("ag2-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("ag2-trip.wal")
    replies = [ToolCall(name, **args).to_message() for name, args in CALLS]
    try:
        with TestAgent(assistant, [*replies, SUMMARY]):
            saga_run_sync(executor, assistant, PROMPT, max_turns=len(CALLS) + 1, silent=True, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
