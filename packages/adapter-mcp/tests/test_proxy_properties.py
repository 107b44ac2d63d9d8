"""Property-based: whatever the client sends, the proxy's message handling does not crash,
forwards only messages it parsed and judged, and never lets an undeclared tools/call through.

In process, :class:`ProxyCore` is fed generated client lines (malformed JSON, arbitrary
bytes with CR, NUL, U+2028 and invalid UTF-8 among them, calls smuggled behind a CR, wrong
types, unknown methods, notifications, batches, duplicated keys, huge and deep messages)
interleaved with server lines. The server side of these in-process runs is a small
responder written below that reads its input the way the SDK's stdio server does (UTF-8
text I/O, universal newlines) and answers tools/list and tools/call the way the real test
server does; the subprocess test at the end sends the same kind of garbage through the
real proxy to the real server and reads the server's own call log.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
from typing import Any

import pytest
from agent_saga_mcp.core import BoundaryMode, ErrorCode, ProxyConfig, ProxyCore
from agent_saga_mcp.policy import McpPolicy
from conftest import POLICY as POLICY_FILE
from conftest import World, encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_saga.log import MemoryWAL

DECLARED = {"create_charge", "create_refund", "search_docs"}
UNDECLARED = ["delete_everything", "", "create_charge ", "CREATE_CHARGE", "saga_rollback", "search_docs\x00"]
POLICY = McpPolicy.load(POLICY_FILE)
TOOLS = [
    {"name": "create_charge", "inputSchema": {"type": "object", "properties": {
        "amount": {"type": "integer"}, "customer": {"type": "string"}}}},
    {"name": "create_refund", "inputSchema": {"type": "object", "properties": {"charge": {"type": "string"}},
                                              "required": ["charge"]}},
    {"name": "search_docs", "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "delete_everything", "inputSchema": {"type": "object", "properties": {}}},
]

ids = st.one_of(st.integers(-(2**63), 2**63), st.text(max_size=8), st.booleans(), st.none(),
                st.floats(allow_nan=False), st.lists(st.integers(), max_size=2))
names = st.one_of(st.sampled_from(sorted(DECLARED) + UNDECLARED), st.text(max_size=12))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
arguments = st.one_of(
    st.fixed_dictionaries({"amount": st.integers(-5, 50), "customer": st.text(max_size=5)}),
    st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    json_values,
)
params = st.one_of(st.fixed_dictionaries({"name": names, "arguments": arguments}),
                   st.fixed_dictionaries({"name": json_values}), json_values)


@st.composite
def tool_calls(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "1.0", 2])), "method": "tools/call",
                               "params": draw(params)}
    if draw(st.booleans()):
        message["id"] = draw(ids)
    return message


others = st.one_of(
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": ids,
                           "method": st.sampled_from(["ping", "resources/list", "prompts/get", "x/unknown",
                                                      "tools/list", "Tools/Call", "tools/call/"])}),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "method": st.sampled_from(
        ["notifications/initialized", "notifications/cancelled", "notifications/progress"]),
        "params": json_values}),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": ids, "result": json_values}),  # answers to the server
    json_values,
)


def duplicate_key_call(name: str, tools_call_first: bool = False) -> bytes:
    methods = b'"method":"tools/call","method":"ping"' if tools_call_first else b'"method":"ping","method":"tools/call"'
    return b'{"jsonrpc":"2.0","id":7,' + methods + b',"params":{"name":"' + name.encode() + b'","arguments":{}}}'


# Bytes that some line reader ends a line at, or that are not text at all.
NASTY = [b"\r", b"\r\r", "\u2028".encode(), "\u2029".encode(), "\x85".encode(), b"\x85", b"\x00", b"\x0b",
         b"\x0c", b"\x1c", b"\x1e", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf"]


@st.composite
def smuggled(draw: st.DrawFn) -> bytes:
    """One JSON value to an LF reader that hides a whole tools/call behind separators (a CR for the SDK)."""
    inner = encode({"jsonrpc": "2.0", "id": draw(ids), "method": "tools/call",
                    "params": {"name": draw(st.sampled_from(UNDECLARED)), "arguments": {}}})
    outer = draw(st.sampled_from([
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":', b"}}"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_docs","arguments":{"query":',
         b"}}}"),
        (b'[{"jsonrpc":"2.0","method":"notifications/progress","params":', b"}]"),
    ]))
    before, after = draw(st.sampled_from(NASTY)), draw(st.sampled_from(NASTY))
    return outer[0] + before + inner + after + outer[1]


@st.composite
def mangled(draw: st.DrawFn) -> bytes:
    """A message's encoding with nasty bytes inserted anywhere (inside strings too)."""
    data = bytearray(encode(draw(st.one_of(tool_calls(), others))))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.sampled_from(NASTY))
    return bytes(data)


client_lines = st.one_of(
    smuggled(),
    mangled(),
    tool_calls().map(encode),
    others.map(encode),
    st.lists(st.one_of(tool_calls(), others), max_size=5).map(encode),  # batches
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.builds(duplicate_key_call, st.sampled_from(UNDECLARED), st.booleans()),
    st.just(encode({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 300_000}})),  # huge
    st.just(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_everything"'),  # truncated
    st.just(b"[" * 5000 + b"]" * 5000),  # deep nesting
    st.integers(190, 1000).map(lambda n: b"[" * n + b"]" * n),  # as deep as the JSON parser goes
)
server_output = st.one_of(
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": ids, "result": json_values}).map(encode),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": ids,
                           "result": st.just({"tools": TOOLS})}).map(encode),
    st.binary(max_size=20),
    mangled(),
)
script = st.lists(st.one_of(client_lines.map(lambda b: ("client", b)), server_output.map(lambda b: ("server", b))),
                  max_size=25)


def server_lines(data: bytes) -> list[str]:
    """The lines the SDK's stdio server reads: UTF-8 text I/O, invalid bytes replaced, universal newlines."""
    return list(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace"))


def server_reads(data: bytes) -> list[Any]:
    """The JSON values the server could read out of ``data``, whichever duplicate key it keeps."""
    values: list[Any] = []
    for piece in server_lines(data):
        for hook in (None, _first_wins):
            try:
                values.append(json.loads(piece, object_pairs_hook=hook))
            except (ValueError, RecursionError):
                continue
    return values


def messages_in(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def tool_calls_in(data: bytes) -> list[dict[str, Any]]:
    """Every tools/call the server could read out of ``data`` (each once)."""
    found = {json.dumps(m, sort_keys=True): m for value in server_reads(data) for m in messages_in(value)
             if isinstance(m, dict) and m.get("method") == "tools/call"}
    return list(found.values())


def one_clean_line(data: bytes) -> None:
    """What the proxy writes is one line of printable ASCII: no reader can split it or misread a byte."""
    assert data.endswith(b"\n"), data
    assert all(0x20 <= byte < 0x7F for byte in data[:-1]), data


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


class Harness:
    """A ProxyCore with a responder in place of the server and the client's view recorded."""

    def __init__(self, boundary: BoundaryMode = BoundaryMode.SESSION, answer_calls: bool = True,
                 answer_pings: bool = False, rollback_grace: float | None = None) -> None:
        self.answer_calls = answer_calls
        self.answer_pings = answer_pings
        self.to_server: list[bytes] = []
        self.to_client: list[bytes] = []
        self._told = asyncio.Condition()
        self.sent: list[Any] = []  # the client's lines as a plain JSON reader reads each whole line
        self.notes: list[str] = []
        self.charges = 0
        config = ProxyConfig(server={"command": ["my_mcp_server"], "cwd": "/"}, policy=POLICY,
                             boundary=boundary, wal=MemoryWAL(), rollback_grace=rollback_grace)
        self.core = ProxyCore(config, self._server_receives, self._client_receives, self.notes.append)

    async def _client_receives(self, data: bytes) -> None:
        one_clean_line(data)
        self.to_client.append(data[:-1])
        async with self._told:
            self._told.notify_all()

    async def answer(self, id_: Any) -> dict[str, Any]:
        """Wait until the client has been answered under ``id_``; that answer."""
        def found() -> dict[str, Any] | None:
            return next((m for m in map(json.loads, self.to_client) if m.get("id") == id_), None)

        async with self._told:
            await self._told.wait_for(lambda: found() is not None)
        answer = found()
        assert answer is not None
        return answer

    async def _server_receives(self, data: bytes) -> None:
        one_clean_line(data)
        self.to_server.append(data[:-1])
        (line,) = server_lines(data)  # exactly one line for the server, holding what the proxy parsed
        value = json.loads(line)
        for message in messages_in(value):
            if not isinstance(message, dict) or "id" not in message:
                continue
            if message.get("method") == "tools/list":
                answer: dict[str, Any] = {"tools": TOOLS}
            elif message.get("method") == "tools/call" and self.answer_calls:
                self.charges += 1
                answer = {"content": [], "structuredContent": {"id": f"ch_{self.charges}"}}
            elif message.get("method") == "ping" and self.answer_pings:
                answer = {}  # what an SDK server answers a ping with
            else:
                continue
            reply = encode({"jsonrpc": "2.0", "id": message["id"], "result": answer})
            asyncio.get_running_loop().call_soon(lambda r=reply: asyncio.ensure_future(self.core.from_server(r)))

    def forwarded_calls(self) -> list[dict[str, Any]]:
        return [call for line in self.to_server for call in tool_calls_in(line + b"\n")]

    def client_line(self, line: bytes) -> None:
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            return
        self.sent.append(value)
        self.sent.extend(messages_in(value))

    def unjudged(self) -> list[Any]:
        """What the server got that is neither the proxy's own request nor a whole client line (or member).

        A declared call reaches the server under an id of the proxy's own: it counts as judged
        when it is a client's message but for that id.
        """
        sent = [_without_id(m) for m in self.sent]
        return [m for m in map(json.loads, self.to_server)
                if m not in self.sent and not (_own(m) and (_without_id(m) in sent or _compensation(m)))]

    def wire_id(self, tool: str) -> Any:
        """The id the server saw on the (only) forwarded call of ``tool``."""
        (found,) = [c["id"] for c in self.forwarded_calls() if c["params"]["name"] == tool]
        return found


def _own(message: Any) -> bool:
    return isinstance(message, dict) and str(message.get("id")).startswith("agent-saga:")


def _without_id(message: Any) -> Any:
    return {k: v for k, v in message.items() if k != "id"} if isinstance(message, dict) else message


def _compensation(message: dict[str, Any]) -> bool:
    """The proxy's own requests: its tools/list, and an undo's call through the live connection."""
    params = message.get("params")
    return message.get("method") == "tools/list" or (isinstance(params, dict) and params.get("name") == "create_refund"
                                                     and "_meta" in params)


async def _run(steps: list[tuple[str, Any]], boundary: BoundaryMode, answer_calls: bool = True,
               answer_pings: bool = False) -> Harness:
    h = Harness(boundary, answer_calls, answer_pings)
    h.core.attach()  # compensating calls go through this in-process connection
    for side, step in steps:
        chunk = step(h) if callable(step) else step  # a server line may answer what the server got
        for line in chunk.split(b"\n"):  # what the pipe reader hands over: lines, never a newline
            if side == "client":
                h.client_line(line)
                await h.core.from_client(line)
            else:
                await h.core.from_server(line)
            await asyncio.sleep(0)  # let answers and steps interleave with the next line
    await asyncio.wait_for(h.core.close(), timeout=60)
    h.core.detach()
    return h


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=script, boundary=st.sampled_from(list(BoundaryMode)))
def test_no_input_crashes_the_proxy_or_leaks_an_undeclared_call(steps: list[tuple[str, bytes]],
                                                                  boundary: BoundaryMode) -> None:
    h = asyncio.run(_run(steps, boundary))
    for call in h.forwarded_calls():
        assert call["params"]["name"] in DECLARED, call
        assert "id" in call  # a tools/call notification is never forwarded
    assert h.unjudged() == []
    assert h.core.fatal is None


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(others.filter(lambda m: isinstance(m, dict) and m.get("method") != "tools/list"
                                       and "Infinity" not in json.dumps(m)), min_size=1, max_size=6),
       spaces=st.sampled_from([b"", b" ", b"\r", b" \r"]))
def test_other_messages_are_forwarded_as_the_proxys_own_encoding(messages: list[dict[str, Any]],
                                                                spaces: bytes) -> None:
    # Loose spacing, raw non-ASCII text (U+2028 and U+0085 among it) and CRLF line ends are
    # all fine JSON; what reaches the server is the same messages in the proxy's encoding.
    lines = [json.dumps(m, separators=(", ", " : "), ensure_ascii=False).encode() + spaces for m in messages]
    h = asyncio.run(_run([("client", line) for line in lines], BoundaryMode.SESSION))
    assert [json.loads(line) for line in h.to_server] == messages
    assert h.to_client == []


def call(name: str, arguments: Any, id_: Any = 1) -> bytes:
    return encode({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}})


def refused_steps(h: Harness) -> list[tuple[str, str]]:
    wal = h.core.config.wal
    assert isinstance(wal, MemoryWAL)
    return [(r["body"]["tool"], r["body"]["rule"]) for r in wal.records() if r["type"] == "STEP_REFUSED"]


@pytest.mark.parametrize(("line", "code", "id_", "calls"), [
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":\r' + call("delete_everything", {}, 2)
                 + b"\r}}", -32700, 1, ["delete_everything"], id="CR-smuggled-in-a-ping"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_docs","arguments":'
                 b'{"query":\r' + call("create_charge", {"amount": 1, "customer": "a"}, 2) + b"\r}}}",
                 -32700, 1, ["search_docs", "create_charge"], id="CR-smuggled-in-a-declared-call"),
    pytest.param(call("search_docs", {"query": "x"}).replace(b",", b",\r", 1), -32700, 1, ["search_docs"],
                 id="CR-as-whitespace"),
    pytest.param(call("delete_everything", {"x": "X"}).replace(b"X", b"\xff"), -32700, None,
                 ["delete_everything"], id="invalid-UTF-8"),
    pytest.param(b"\xef\xbb\xbf" + call("delete_everything", {}), -32700, None, [], id="BOM"),  # nobody reads it
    pytest.param(call("search_docs", {"query": float("nan")}), -32700, None, ["search_docs"], id="NaN"),
    pytest.param(call("search_docs", {"query": 1}).replace(b"1}", b"1e400}"), -32700, None, ["search_docs"],
                 id="number-beyond-float"),
    pytest.param(call("search_docs", {"query": "\ud800"}), -32700, 1, ["search_docs"], id="lone-surrogate"),
    pytest.param(duplicate_key_call("delete_everything"), -32600, None, ["delete_everything"], id="duplicate-key"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 200 + b"]" * 200 + b"}", -32600, 1, [],
                 id="too-deep"),
])
def test_a_line_the_proxy_cannot_stand_behind_is_refused_and_its_calls_logged(
    line: bytes, code: int, id_: Any, calls: list[str]
) -> None:
    h = asyncio.run(_run([("client", line)], BoundaryMode.SESSION))
    assert h.to_server == []
    (answer,) = map(json.loads, h.to_client)
    assert answer["error"]["code"] == code and answer["id"] == id_
    assert refused_steps(h) == [(name, "mcp.line") for name in calls]  # what each reader would have called


@pytest.mark.parametrize(("text", "value"), [
    ('"\\ud83d\\ude00"', "\U0001f600"),  # an escaped surrogate pair is one character
    ('"a\u2028b\u0085c"', "a\u2028b\x85c"),  # raw separators inside a string are text
])
def test_text_a_line_reader_might_split_reaches_the_server_escaped(text: str, value: str) -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_docs","arguments":{"query":' \
        + text.encode() + b"}}}\r"
    h = asyncio.run(_run([("client", line)], BoundaryMode.SESSION))
    (forwarded,) = [c for c in h.forwarded_calls() if c["params"]["name"] == "search_docs"]
    assert forwarded["params"]["arguments"] == {"query": value}
    assert refused_steps(h) == []


def test_a_message_exactly_as_deep_as_allowed_is_forwarded() -> None:
    deep = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 199 + b"]" * 199 + b"}"  # 200 levels
    h = asyncio.run(_run([("client", deep)], BoundaryMode.SESSION))
    assert [json.loads(line) for line in h.to_server] == [json.loads(deep)]


def test_a_server_line_the_proxy_cannot_read_never_reaches_the_client() -> None:
    # A server that smuggles an early answer to a held call behind a CR: a client that ends
    # lines at CR would hear of the charge before its outcome is in the log.
    charge = call("create_charge", {"amount": 1, "customer": "a"}, "c1")
    result = {"content": [], "structuredContent": {"id": "ch_9"}}

    def answer(h: Harness) -> bytes:
        return encode({"jsonrpc": "2.0", "id": h.wire_id("create_charge"), "result": result})

    steps = [("client", charge), *[("server", b"")] * 5, ("server", lambda h: b"garbage\r" + answer(h)),
             ("server", "{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"\u2028\"}".encode()),
             ("server", answer)]
    h = asyncio.run(_run(steps, BoundaryMode.SESSION, answer_calls=False))
    received = [json.loads(line) for line in h.to_client]
    assert received == [{"jsonrpc": "2.0", "method": "n", "params": "\u2028"},
                        {"jsonrpc": "2.0", "id": "c1", "result": result}]
    assert any("not JSON" in note and "garbage" in note for note in h.notes)


@settings(max_examples=40, deadline=None)
@given(names=st.lists(st.sampled_from(UNDECLARED), min_size=1, max_size=5))
def test_every_undeclared_call_gets_its_own_error_answer(names: list[str]) -> None:
    calls = [encode({"jsonrpc": "2.0", "id": f"req-{i}", "method": "tools/call",
                     "params": {"name": n, "arguments": {}}}) for i, n in enumerate(names)]
    h = asyncio.run(_run([("client", c) for c in calls], BoundaryMode.SESSION))
    answers = {json.loads(a)["id"]: json.loads(a)["error"] for a in h.to_client}
    assert sorted(answers) == sorted(f"req-{i}" for i in range(len(names)))
    assert {e["code"] for e in answers.values()} == {int(ErrorCode.TOOL_NOT_DECLARED)}
    assert h.to_server == []


def test_declared_calls_in_a_batch_are_steps_and_answered_one_by_one() -> None:
    batch = encode([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "create_charge", "arguments": {"amount": 3, "customer": "a"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delete_everything"}},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
    ])
    h = asyncio.run(_run([("client", batch)], BoundaryMode.SESSION))
    answers = {json.loads(a)["id"]: json.loads(a) for a in h.to_client}
    assert answers[1]["result"]["structuredContent"] == {"id": "ch_1"}
    assert answers[2]["error"]["code"] == int(ErrorCode.TOOL_NOT_DECLARED)
    assert [c["params"]["name"] for c in h.forwarded_calls()] == ["create_charge"]
    (saga,) = h.core.sagas
    assert saga.status.value == "COMPLETED"
    # The refusal is a record of the same saga (Saga.refuse), not a step: nothing ran.
    assert [(s.tool, s.state.value) for s in saga.steps] == [("create_charge", "COMMITTED")]
    assert refused_steps(h) == [("delete_everything", "policy.unclassified")]  # refused, and on record


def test_concurrent_commits_and_rollbacks_each_get_one_answer() -> None:
    charge = encode({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
                     "params": {"name": "create_charge", "arguments": {"amount": 1, "customer": "a"}}})
    control = [encode({"jsonrpc": "2.0", "id": f"b{i}", "method": "tools/call", "params": {"name": tool}})
               for i, tool in enumerate(["saga_rollback", "saga_commit", "saga_rollback"])]
    h = asyncio.run(_run([("client", line) for line in [charge, *control]], BoundaryMode.EXPLICIT))
    answers = {json.loads(a)["id"]: json.loads(a) for a in h.to_client}
    assert sorted(answers) == ["b0", "b1", "b2", "c"]
    texts = [answers[f"b{i}"]["result"]["content"][0]["text"] for i in range(3)]
    assert texts[0].startswith("rolled back") and "1 compensated" in texts[0]  # waited for the charge
    assert "nothing to do" in texts[1] and "nothing to do" in texts[2]
    refunds = [c for line in h.to_server for c in tool_calls_in(line) if c["params"]["name"] == "create_refund"]
    assert refunds[0]["params"]["arguments"] == {"charge": "ch_1"}


def test_a_rollback_waits_for_a_call_the_server_has_not_answered_only_within_its_grace() -> None:
    # A call in flight when saga_rollback arrives is waited for within --rollback-grace (here 0),
    # then left in flight: the rollback answers at once, not clean, instead of waiting for a
    # server that may never answer; the call's outcome is settled when its answer arrives.
    async def scenario() -> tuple[Harness, dict[str, Any]]:
        h = Harness(BoundaryMode.EXPLICIT, answer_calls=False, rollback_grace=0)
        await h.core.from_client(call("create_charge", CHARGE, "c"))
        await h.core.from_client(encode({"jsonrpc": "2.0", "id": "r", "method": "tools/call",
                                         "params": {"name": "saga_rollback"}}))
        rolled = await asyncio.wait_for(h.answer("r"), timeout=30)
        assert not [m for m in map(json.loads, h.to_client) if m.get("id") == "c"]  # still in flight
        late = {"jsonrpc": "2.0", "id": h.wire_id("create_charge"), "result": {"content": [], "isError": True}}
        await h.core.from_server(encode(late))
        await asyncio.wait_for(h.core.close(), timeout=60)
        return h, rolled

    h, rolled = asyncio.run(scenario())
    text = rolled["result"]["content"][0]["text"]
    assert "1 unresolved; clean=False" in text and rolled["result"]["isError"], text
    (saga,) = h.core.sagas
    (step,) = saga.steps
    assert step.state.value == "UNKNOWN"  # the server's late answer said the charge failed
    wal = h.core.config.wal
    assert isinstance(wal, MemoryWAL)
    types = [r["type"] for r in wal.records()]
    assert types.index("SAGA_ROLLED_BACK") < types.index("STEP_UNKNOWN")


def test_a_cancelled_call_is_an_unknown_step_and_gets_no_answer() -> None:
    call = encode({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                   "params": {"name": "create_charge", "arguments": {"amount": 1, "customer": "a"}}})
    cancel = encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c1"}})
    steps = [("client", call)] + [("server", b"")] * 5 + [("client", cancel)]
    h = asyncio.run(_run(steps, BoundaryMode.SESSION, answer_calls=False))  # the server never answers
    # The server hears about the cancellation of the request it got (under the proxy's id for it).
    heard = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": h.wire_id("create_charge")}}
    assert heard in map(json.loads, h.to_server)
    assert h.to_client == []  # and the client gets no answer to a request it cancelled
    (step,) = h.core.sagas[0].steps
    assert step.state.value == "UNKNOWN"


def committed_undos(h: Harness) -> list[Any]:
    """The undo each committed step's record carries (None: committed with no undo)."""
    wal = h.core.config.wal
    assert isinstance(wal, MemoryWAL)
    return [(r["body"].get("compensation") or {}).get("kwargs") for r in wal.records() if r["type"] == "STEP_COMMITTED"]


PING = {"jsonrpc": "2.0", "method": "ping"}
CHARGE = {"amount": 1, "customer": "a"}
REFUND_CH_1 = {"server": None, "tool": "create_refund", "arguments": {"charge": "ch_1"}}


@pytest.mark.parametrize("id_", [5, "c"])
def test_a_request_reusing_the_id_of_a_call_in_flight_is_refused_and_the_call_keeps_its_result(id_: Any) -> None:
    # Issue 25 item 10: the ping's answer ({}) used to be taken for the charge's result, and the
    # step committed with no undo while the server had charged.
    steps = [("client", call("create_charge", CHARGE, id_)), ("client", encode({**PING, "id": id_}))]
    h = asyncio.run(_run(steps, BoundaryMode.SESSION, answer_pings=True))
    answers = [json.loads(a) for a in h.to_client]
    errors = [a for a in answers if "error" in a]
    assert [(e["id"], e["error"]["code"]) for e in errors] == [(id_, int(ErrorCode.INVALID_REQUEST))]
    assert "already in use" in errors[0]["error"]["message"]
    assert [a["result"]["structuredContent"] for a in answers if "result" in a] == [{"id": "ch_1"}]
    assert not [m for m in map(json.loads, h.to_server) if m.get("method") == "ping"]  # never forwarded
    assert committed_undos(h) == [REFUND_CH_1]


@pytest.mark.parametrize("ping_id", [5, 5.0])
def test_an_answer_to_an_earlier_request_under_the_same_id_never_settles_a_call(ping_id: Any) -> None:
    # The ping goes first and its answer comes once the call is in flight. The lookalike id
    # 5.0 is answered under 5 here, as a reader that takes 5.0 for 5 would answer it.
    answer = encode({"jsonrpc": "2.0", "id": 5 if ping_id == 5.0 else ping_id, "result": {}})
    steps = [("client", encode({**PING, "id": ping_id})), ("client", call("create_charge", CHARGE, 5)),
             ("server", answer)]
    h = asyncio.run(_run(steps, BoundaryMode.SESSION))
    results = [json.loads(a)["result"] for a in h.to_client if "result" in json.loads(a)]
    assert {"content": [], "structuredContent": {"id": "ch_1"}} in results  # the call's own answer
    assert committed_undos(h) == [REFUND_CH_1]


def test_a_request_under_an_id_of_the_proxys_own_kind_is_refused() -> None:
    own = f"agent-saga:{os.getpid()}:1"  # what the proxy's first own request (here: the call) is sent as
    steps = [("client", encode({**PING, "id": own})), ("client", encode([{**PING, "id": own}]))]
    h = asyncio.run(_run(steps, BoundaryMode.SESSION, answer_pings=True))
    assert [json.loads(a)["error"]["code"] for a in h.to_client] == [int(ErrorCode.INVALID_REQUEST)] * 2
    assert h.to_server == []


@pytest.mark.slow
def test_garbage_through_the_real_proxy_never_reaches_the_real_server(world: World) -> None:
    (world.root / "saga-policy.json").write_text(json.dumps(POLICY.policy.to_dict()))
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    lines = [
        encode(init),
        encode({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        b"this is not json",
        b"\xff\xfe\x00garbage",
        duplicate_key_call("delete_everything"),
        encode({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "delete_everything"}}),
        encode([{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "delete_everything"}},
                {"jsonrpc": "2.0", "id": 6, "method": "ping"}]),
        encode({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": 42}}),
        encode({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"pad": "y" * 2_000_000}}),
        b'{"jsonrpc":"2.0","id":11,"method":"ping","params":{"pad":\r' + call("delete_everything", {}, 12) + b"\r}}",
        encode({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                "params": {"name": "search_docs", "arguments": {"query": "ok"}}}),
    ]
    out = subprocess.run(
        ["agent-saga", "mcp", "--policy", "saga-policy.json", "--", "python", "-m", "my_mcp_server"],
        input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120, env=world.env, cwd=world.root, check=False,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    by_id = {a.get("id"): a for a in answers}
    assert world.called() == ["search_docs"]  # the only declared call; nothing else reached the server
    assert by_id[10]["result"]["structuredContent"] == {"hits": ["doc about ok"]}
    assert by_id[5]["error"]["code"] == int(ErrorCode.TOOL_NOT_DECLARED)
    assert by_id[8]["error"]["code"] == int(ErrorCode.INVALID_PARAMS)
    assert "result" in by_id[6] and "result" in by_id[9]  # pings answered by the server itself
    assert by_id[11]["error"]["code"] == int(ErrorCode.PARSE_ERROR) and 12 not in by_id  # the smuggled call
    codes = [a["error"]["code"] for a in answers if a.get("id") is None]
    assert int(ErrorCode.PARSE_ERROR) in codes and int(ErrorCode.INVALID_REQUEST) in codes
