"""A CrewAI crew books a trip; the card is declined; the bookings are undone.

    python examples/crewai_trip.py

The trip's tools and their undos are in trip.py. Here they become CrewAI ``@tool``s,
``wrap_tool`` declares what each one is, and ``saga_kickoff`` makes ``crew.kickoff()`` one
transaction. CrewAI hands the declined charge to the agent as text and the crew goes on; the
helper then fails the run, so nothing booked stays booked. The model is a scripted ``BaseLLM``
making native tool calls (no network, no key): with a key, pass ``llm="gpt-4o"`` instead. The
log lands in ./crewai-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-crewai[crewai]'
"""

import json
import os
from pathlib import Path
from typing import Any

from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.crewai import saga_kickoff, wrap_tool

os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true", CREWAI_TRACING_ENABLED="false")
from crewai import Agent, Crew, Task  # after the variables above: CrewAI reads them when imported
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool


class ScriptedLLM(BaseLLM):
    """A stand-in for a real model: one native tool call per turn, then a summary."""

    turn: int = 0

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
             **kwargs: Any) -> Any:
        self.turn += 1
        if self.turn > len(CALLS):
            return SUMMARY
        name, args = CALLS[self.turn - 1]
        return [{"id": f"call_{self.turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


agent = Agent(
    role="travel agent", goal="book the trip the traveller asks for", backstory="books trips", verbose=False,
    llm=ScriptedLLM(model="scripted"),
    tools=[wrap_tool(tool(hold_seat), semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(tool(book_hotel), semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(tool(charge_card), semantics="IRREVERSIBLE")],
)
crew = Crew(agents=[agent], tasks=[Task(description=PROMPT, expected_output="a booked trip", agent=agent)])


def main() -> None:
    Path("crewai-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("crewai-trip.wal")
    try:
        saga_kickoff(crew, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
