"""Request smuggling through line framing, against the real SDK stdio server of this env.

The proxy reads the client's input as lines ended by LF. The SDK's stdio server (1.x and
2.x) reads its stdin through Python's text I/O with universal newlines, so a bare CR ends
a line there too: one line that is a single JSON value to the proxy can be several
messages to the server. The first tests pin that premise against the real server (so the
payloads below really smuggle); the others send the same payloads through the real proxy
and read the server's own call log and the saga log.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SEED_ENFORCE, SERVER, World, encode, exchange, run_cli, write_policy

from agent_saga.log import read_records

pytestmark = pytest.mark.slow

INIT = [
    encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
    encode({"jsonrpc": "2.0", "method": "notifications/initialized"}),
]
# Line separators of str.splitlines() and friends; only CR (besides LF) may end a line for the server.
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00"]


def call(id_: Any, name: str, arguments: dict[str, Any]) -> bytes:
    return encode({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}})


# Each payload is one JSON value to a reader that splits on LF alone (the smuggled call is
# the value of a field), and three lines to the SDK server: two broken halves around a
# complete tools/call of its own.
UNDECLARED = (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":\r'
              + call(2, "delete_everything", {}) + b"\r}}")
HALTED = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_docs","arguments":{"query":\r'
          + call(2, "create_charge", {"amount": 5, "customer": "acme"}) + b"\r}}}")
PAYLOADS = {"undeclared": (UNDECLARED, "delete_everything"), "halted": (HALTED, "create_charge")}


def by_id(answers: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {a["id"]: a for a in answers if "id" in a}


def test_the_sdk_server_ends_a_line_at_cr_and_at_no_other_separator(world: World) -> None:
    pings = [encode({"jsonrpc": "2.0", "id": f"{i}a", "method": "ping"}) + sep.encode()
             + encode({"jsonrpc": "2.0", "id": f"{i}b", "method": "ping"}) for i, sep in enumerate(SEPARATORS)]
    answered = by_id(exchange(SERVER, world, [*INIT, *pings]))
    splitting = {sep for i, sep in enumerate(SEPARATORS) if f"{i}a" in answered and f"{i}b" in answered}
    assert splitting == {"\r"}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_the_payload_smuggles_a_call_into_the_sdk_server(world: World, payload: str) -> None:
    line, tool = PAYLOADS[payload]
    answers = by_id(exchange(SERVER, world, [*INIT, line], wait_for=(2,)))
    assert world.called() == [tool]  # the server ran the call hidden inside the line
    assert "result" in answers[2]


def test_a_smuggled_call_of_an_undeclared_tool_never_reaches_the_server(world: World) -> None:
    write_policy(world)
    answers = exchange(SEED_ENFORCE, world, [*INIT, UNDECLARED, call(3, "search_docs", {"query": "after"})])
    answered = by_id(answers)
    assert "delete_everything" not in world.called()
    assert world.called() == ["search_docs"]  # the session goes on after the refused line
    assert answered[1]["error"]["code"] == -32700 and "carriage return" in answered[1]["error"]["message"]
    assert 2 not in answered  # the smuggled request got no answer from anyone
    assert "result" in answered[3]
    assert refused(world, "delete_everything") == ["mcp.line"]


def test_a_smuggled_call_of_a_halted_tool_never_reaches_the_server(world: World) -> None:
    write_policy(world)
    halt = run_cli(world, "halt", "--scope", "tool:create_charge", "--reason", "incident", "--by", "tester",
                   "--wal-path", str(world.wal))
    assert halt.returncode == 0, halt.stderr
    answers = exchange(SEED_ENFORCE, world, [
        *INIT, HALTED, call(3, "search_docs", {"query": "after"}),
        call(4, "create_charge", {"amount": 5, "customer": "acme"}),
    ])
    answered = by_id(answers)
    assert world.charges() == {}
    assert world.called() == ["search_docs"]  # neither the smuggled nor the halted call ran
    assert answered[1]["error"]["code"] == -32700
    assert 2 not in answered
    assert answered[4]["error"]["code"] == -32002  # the switch refuses the plain call
    assert refused(world, "create_charge") == ["mcp.line", "kill-switch"]  # the smuggled call, the plain one
    assert refused(world, "search_docs") == ["mcp.line"]  # the outer call of the refused line


def refused(world: World, tool: str) -> list[str]:
    """The rules of the STEP_REFUSED records for ``tool``, oldest first."""
    return [r["body"]["rule"] for r in read_records(world.wal)
            if r["type"] == "STEP_REFUSED" and r["body"]["tool"] == tool]


def test_a_ping_reusing_the_id_of_a_call_in_flight_cannot_settle_the_call(world: World) -> None:
    # Issue 25 item 10. Both lines are read before the call's step even forwards it: the SDK
    # server answered the ping at once with {}, which the proxy took for the charge's result,
    # and the charge was committed with no undo while the server had charged.
    write_policy(world)
    ping = encode({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    answers = exchange(SEED_ENFORCE, world, [*INIT, call(5, "create_charge", {"amount": 5, "customer": "acme"}), ping],
                       wait_for=(5,))
    for_5 = [a for a in answers if a.get("id") == 5]
    assert [a["error"]["code"] for a in for_5 if "error" in a] == [-32600]  # the ping, refused
    (result,) = [a["result"] for a in for_5 if "result" in a]
    assert result["structuredContent"]["id"] == "ch_1"  # the call's own answer
    assert world.charges()["ch_1"]["refunded"] is False
    (committed,) = [r["body"] for r in read_records(world.wal) if r["type"] == "STEP_COMMITTED"]
    assert committed["compensation"]["kwargs"]["arguments"] == {"charge": "ch_1"}
