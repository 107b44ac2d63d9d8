"""A Strands agent books a trip; the card is declined; the bookings are undone.

    python examples/strands_trip.py

The trip's tools and their undos are in trip.py. Here they become Strands ``@tool``s,
``wrap_tool`` declares what each one is, and ``saga_run_sync`` makes the invocation one
transaction. Strands hands the declined charge to the model as an error result and goes on; the
helper then fails the run, so nothing booked stays booked. The model is a scripted
``strands.models.Model`` (no network, no AWS): with credentials, drop ``model=``. The log lands in
./strands-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-strands[strands]'
"""

import json
from collections.abc import AsyncGenerator, AsyncIterable
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.models import Model
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.strands import saga_run_sync, wrap_tool


class ScriptedModel(Model):
    """A stand-in for a real model, streaming as Strands' models do: one tool use per turn, then a summary."""

    def __init__(self) -> None:
        self.turn = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model: Any, prompt: Any, system_prompt: str | None = None,
                          **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        raise NotImplementedError

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: str | None = None,
                     **kwargs: Any) -> AsyncIterable[Any]:
        self.turn += 1
        yield {"messageStart": {"role": "assistant"}}
        if self.turn <= len(CALLS):
            name, args = CALLS[self.turn - 1]
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"call_{self.turn}", "name": name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": SUMMARY}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


agent = Agent(model=ScriptedModel(), callback_handler=None,
              tools=[wrap_tool(tool(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
                     wrap_tool(tool(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
                     wrap_tool(tool(charge_card), semantics="IRREVERSIBLE")])


def main() -> None:
    Path("strands-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("strands-trip.wal")
    try:
        saga_run_sync(agent, PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
