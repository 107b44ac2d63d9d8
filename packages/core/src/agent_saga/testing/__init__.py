"""The conformance suite every framework adapter's tests subclass, and what those tests share.

``AdapterConformance`` holds the promises every adapter keeps through its framework's real
loop; ``Desk`` and the checks beside it are the planned-calls scene (one model response's
calls, run ahead by a Speculator); ``ChatServer`` is a local Chat Completions server that
answers from a script (a ``JSONServer``, as an adapter's own scripted model server may be);
``assert_trip_undone`` runs one of the repository's examples as a user does;
``every_step_option`` and ``spy_on_steps`` check that a front door hands every step option
to the engine, ``assert_wrap_tool_hook`` that an adapter's plugin hook wraps its own tools only.
What an adapter's own tests tell besides: the trip (``book_flight``,
``charge_card``, ``DONE``, ...), the fleet snippet (``assert_fleet_undone``) and the
moved-framework check (``assert_moved_fails_at_import``), the trip a model books with a malformed
call (``SeatTrip``, ``REFUSED_CALLS``, ``assert_refused_call_is_no_step``), and a durable run killed in a process
of its own (``kill_at``, ``hold``, ``recover``, the ``World`` its tools write). ``from agent_saga.testing import
AdapterConformance`` imports pytest; nothing else in agent-saga does.
"""

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.testing._chat_server import ChatServer, Received, Reply
from agent_saga.testing._conformance import (
    UNDO_HANDLER,
    AdapterConformance,
    Call,
    ledger,
    root_cause,
)
from agent_saga.testing._examples import EXAMPLES, assert_trip_undone
from agent_saga.testing._json_server import JSONServer
from agent_saga.testing._killed import World, hold, kill_at, recover, wait_out_lease, world_env
from agent_saga.testing._malformed import (
    REFUSED_CALLS,
    SeatTrip,
    assert_refused_call_is_no_step,
    assert_seat_released,
)
from agent_saga.testing._moved import assert_moved_fails_at_import
from agent_saga.testing._parallel import AWAITED, CANCELLED, RUN_ON
from agent_saga.testing._planned import (
    CALLS,
    COMPENSABLE_REFUSED,
    TOUCHES,
    Desk,
    check_ran_once,
    check_redeemed,
    records,
    run_ahead,
)
from agent_saga.testing._shared import assert_wrap_tool_hook, every_step_option, spy_on_steps
from agent_saga.testing._stopped import (
    Lookups,
    committed_steps,
    committed_tools,
    stop_run_if,
    stopped_then_resumed,
)
from agent_saga.testing._trip import (
    DONE,
    REF_UNDO,
    TRIP,
    TRIP_POLICY,
    assert_fleet_undone,
    assert_trip_failing_after_the_run_undone,
    assert_trip_undone_newest_first,
    book_flight,
    cancel_ref,
    cancelled,
    charge_card,
    committed,
    refunded,
    send_confirmation,
    trip_world,
)

__all__ = [
    "AWAITED", "CALLS", "CANCELLED", "COMPENSABLE_REFUSED", "DONE", "EXAMPLES", "REFUSED_CALLS", "REF_UNDO", "RUN_ON",
    "TOUCHES", "TRIP", "TRIP_POLICY", "UNDO_HANDLER", "AdapterConformance", "Call", "ChatServer", "Desk",
    "JSONServer", "Lookups", "Received", "Reply", "SeatTrip", "World", "assert_fleet_undone",
    "assert_moved_fails_at_import", "assert_refused_call_is_no_step", "assert_seat_released",
    "assert_trip_failing_after_the_run_undone", "assert_trip_undone", "assert_trip_undone_newest_first",
    "assert_wrap_tool_hook", "book_flight", "cancel_ref", "cancelled", "charge_card", "check_ran_once",
    "check_redeemed", "committed", "committed_steps", "committed_tools", "every_step_option",
    "hold", "kill_at", "ledger", "records", "recover", "refunded", "root_cause", "run_ahead", "send_confirmation",
    "spy_on_steps", "stop_run_if", "stopped_then_resumed", "trip_world",
    "wait_out_lease", "world_env",
]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
