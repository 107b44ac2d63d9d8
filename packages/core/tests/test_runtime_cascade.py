"""The cascade (issue 26 part 3): cheapest tier first, escalate on evidence, never return the unverified.

Tiers here are scripted objects with the tier interface; the same ladder through the
real openai SDK against a local Chat Completions server is in test_runtime_openai_tier.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import (
    CascadeExhausted,
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    TierAnswer,
    ToolCall,
    all_of,
    cascade,
    matches_schema,
    saga_scope,
    tools_must_exist,
)
from agent_saga.audit import certify_log, verify_log
from agent_saga.log import read_records
from agent_saga.recovery import fold
from agent_saga.runtime import Verdict
from agent_saga.ui import reconstruct, to_dot, to_mermaid

TOOLS = ["send_email", "lookup_customer"]


@dataclass
class ScriptedTier:
    """A tier that answers from a script and remembers the feedback it was given."""

    name: str
    answer: TierAnswer | Exception
    feedback: list[str | None] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)

    async def complete(self, request: Any, feedback: str | None = None) -> TierAnswer:
        self.requests.append(request)
        self.feedback.append(feedback)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def calls(*names: str, tokens: int = 100) -> TierAnswer:
    return TierAnswer("", tuple(ToolCall(n, {"to": "ann@example.com"}) for n in names), tokens)


async def test_a_cheap_tier_that_calls_send_emial_escalates_and_both_tiers_tokens_count() -> None:
    small = ScriptedTier("local-7b", calls("send_emial", tokens=110))
    frontier = ScriptedTier("frontier", calls("send_email", tokens=550))
    result = await cascade("email Ann the invoice", ladder=[small, frontier], verify=tools_must_exist(TOOLS))

    assert result.host == "frontier"
    assert result.escalations == 1
    assert result.tokens_used == 660  # the rejected tier's 110 count
    assert [c.name for c in result.answer.tool_calls] == ["send_email"]
    # The next tier got the same request plus the specific reason, the first got none.
    assert small.feedback == [None]
    assert frontier.requests == ["email Ann the invoice"]
    assert frontier.feedback == ["called tool(s) that do not exist: ['send_emial']"]
    lines = result.format_text().splitlines()
    assert lines[0] == "cascade resolved on frontier after 1 escalation(s)"
    assert re.fullmatch(r"  ->  local-7b            110 tok  \d+\.\d\ds  rejected: called tool\(s\) that do not "
                        r"exist: \['send_emial'\]", lines[1]), lines[1]
    assert re.fullmatch(r"  ok  frontier            550 tok  \d+\.\d\ds", lines[2]), lines[2]
    assert lines[3] == "  total tokens across all tiers: 660"


async def test_the_first_tier_that_passes_answers_and_later_tiers_are_never_asked() -> None:
    small = ScriptedTier("small", calls("send_email", tokens=40))
    frontier = ScriptedTier("frontier", calls("send_email", tokens=900))
    result = await cascade("x", ladder=[small, frontier], verify=tools_must_exist(TOOLS))
    assert (result.host, result.escalations, result.tokens_used) == ("small", 0, 40)
    assert frontier.requests == []


async def test_an_exhausted_ladder_raises_with_the_full_trace_and_returns_nothing() -> None:
    small = ScriptedTier("small", calls("send_emial", tokens=110))
    mid = ScriptedTier("mid", calls("delete_everything", "send_email", tokens=300))
    with pytest.raises(CascadeExhausted, match=r"none of 2 tier\(s\) passed verification; the last \(mid\) was "
                                                r"rejected: called tool\(s\) that do not exist: \['delete_everything'\]"
                       ) as caught:
        await cascade("x", ladder=[small, mid], verify=tools_must_exist(TOOLS))
    err = caught.value
    assert [(a.tier, a.tokens, a.ok) for a in err.attempts] == [("small", 110, False), ("mid", 300, False)]
    assert err.tokens_used == 410
    assert mid.feedback == ["called tool(s) that do not exist: ['send_emial']"]
    text = err.format_text().splitlines()
    assert text[0] == "cascade exhausted: no tier passed after 2 attempt(s)"
    assert all(line.startswith("  ->  ") and "rejected: " in line for line in text[1:3])
    assert text[3] == "  total tokens across all tiers: 410"


async def test_a_tier_that_fails_is_escalated_past_with_its_error_scrubbed() -> None:
    from agent_saga.redaction import remember_secret

    remember_secret("sk-local-secret-123456")
    down = ScriptedTier("down", ConnectionError("refused, key sk-local-secret-123456"))
    up = ScriptedTier("up", calls("send_email", tokens=7))
    result = await cascade("x", ladder=[down, up], verify=tools_must_exist(TOOLS))
    assert result.host == "up" and result.tokens_used == 7
    first = result.attempts[0]
    assert not first.ok and first.reason.startswith("the tier failed: ConnectionError: refused, key ")
    assert "sk-local-secret-123456" not in first.reason
    assert up.feedback == [None]  # an outage is not something the next model could correct


async def test_after_an_outage_the_next_tier_still_gets_the_last_verifiers_reason() -> None:
    wrong = ScriptedTier("wrong", calls("send_emial", tokens=5))
    down = ScriptedTier("down", TimeoutError("read timed out"))
    up = ScriptedTier("up", calls("send_email", tokens=7))
    result = await cascade("x", ladder=[wrong, down, up], verify=tools_must_exist(TOOLS))
    assert (result.host, result.escalations, result.tokens_used) == ("up", 2, 12)
    assert down.feedback == up.feedback == ["called tool(s) that do not exist: ['send_emial']"]


SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}


@pytest.mark.parametrize(("text", "reason"), [
    ("the amount is 4200", r"^the answer is not JSON \(Expecting value at char 0\)$"),
    ('{"amount": "4200"}', r"^the answer does not match the schema at \$\.amount: '4200' is not of type 'integer'$"),
    ('{"total": 4200}', r"^the answer does not match the schema at \$: 'amount' is a required property$"),
])
async def test_the_schema_verifier_rejects_with_the_specific_fault(text: str, reason: str) -> None:
    verdict = await _judge(matches_schema(SCHEMA), TierAnswer(text))
    assert not verdict.ok and re.match(reason, verdict.reason), verdict.reason


async def test_the_schema_verifier_accepts_a_matching_answer_and_refuses_a_broken_schema() -> None:
    assert (await _judge(matches_schema(SCHEMA), TierAnswer('{"amount": 4200}'))).ok
    with pytest.raises(ConfigurationError, match="the schema is not valid JSON Schema"):
        matches_schema({"type": "integr"})


async def test_a_schema_cascade_escalates_from_prose_to_json() -> None:
    small = ScriptedTier("small", TierAnswer("sure! 4200", (), 20))
    big = ScriptedTier("big", TierAnswer('{"amount": 4200}', (), 80))
    result = await cascade("amount?", ladder=[small, big], verify=matches_schema(SCHEMA))
    assert result.text == '{"amount": 4200}' and result.tokens_used == 100
    assert big.feedback[0] is not None and big.feedback[0].startswith("the answer is not JSON")


async def test_all_of_passes_only_when_every_verifier_passes_and_names_every_fault() -> None:
    both = all_of(tools_must_exist(TOOLS), matches_schema(SCHEMA))
    good = TierAnswer('{"amount": 1}', (ToolCall("send_email"),))
    assert (await _judge(both, good)).ok
    bad = TierAnswer('{"amount": "1"}', (ToolCall("send_emial"),))
    verdict = await _judge(both, bad)
    assert not verdict.ok
    assert verdict.reason.startswith("called tool(s) that do not exist: ['send_emial']; ")
    assert "does not match the schema at $.amount" in verdict.reason
    half = TierAnswer('{"amount": 1}', (ToolCall("send_emial"),))
    assert (await _judge(both, half)).reason == "called tool(s) that do not exist: ['send_emial']"


async def _judge(verifier: Any, answer: TierAnswer) -> Verdict:
    from agent_saga.runtime._verifiers import judge

    return await judge(verifier, answer)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ladder": []}, r"cascade needs ladder=\[tier, \.\.\.\]"),
    ({"ladder": [object()]}, r"every tier needs a non-empty str \.name"),
    ({"ladder": [type("T", (), {"name": "t", "complete": lambda self, r, f=None: None})()]},
     r"tier 't' needs `async def complete"),
    ({"verify": "tools"}, r"cascade needs verify="),
])
async def test_a_misconfigured_cascade_says_what_is_wrong(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"ladder": [ScriptedTier("t", calls())], "verify": tools_must_exist(TOOLS), **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        await cascade("x", **args)


async def test_a_verifier_that_returns_a_bool_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"a verifier returns a Verdict"):
        await cascade("x", ladder=[ScriptedTier("t", calls())], verify=lambda answer: True)
    with pytest.raises(ConfigurationError, match="not one str"):
        tools_must_exist("send_email")


# -- the record ---------------------------------------------------------------------------------


async def test_the_whole_ladder_is_one_cascade_resolved_record_that_verify_and_certify_accept(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "run.wal")
    small = ScriptedTier("local-7b", calls("send_emial", tokens=110))
    frontier = ScriptedTier("frontier", calls("send_email", tokens=550))
    async with saga_scope(wal, name="billing") as saga:
        result = await cascade("email Ann", ladder=[small, frontier], verify=tools_must_exist(TOOLS))
    wal.close()
    records = list(read_records(tmp_path / "run.wal"))
    (rec,) = [r for r in records if r["type"] == "CASCADE_RESOLVED"]
    assert rec["saga"] == saga.saga_id and rec.get("step") is None and rec["seq"] == result.seq
    body = rec["body"]
    assert body["verdict"] == "cascade resolved on frontier after 1 escalation(s)"
    assert (body["host"], body["escalations"], body["tokens_used"]) == ("frontier", 1, 660)
    assert [(t["tier"], t["tokens"], t["ok"], t.get("reason")) for t in body["ladder"]] == [
        ("local-7b", 110, False, "called tool(s) that do not exist: ['send_emial']"),
        ("frontier", 550, True, None),
    ]
    assert body["ladder"][0]["tool_calls"] == ["send_emial"]
    assert verify_log(tmp_path / "run.wal").status == "intact"
    assert certify_log(tmp_path / "run.wal").certified
    view = fold(records)[saga.saga_id]
    assert view.ended == "SAGA_COMPLETED" and view.steps == {}  # no phantom step from the record


async def test_an_exhausted_ladder_is_one_cascade_exhausted_record() -> None:
    wal = MemoryWAL()
    with pytest.raises(CascadeExhausted):
        await cascade("x", ladder=[ScriptedTier("a", calls("nope", tokens=3))], verify=tools_must_exist(TOOLS),
                      wal=wal, saga_id="run-1")
    (rec,) = list(wal.records())
    assert (rec["type"], rec["saga"]) == ("CASCADE_EXHAUSTED", "run-1")
    assert rec["body"]["verdict"] == ("cascade exhausted: no tier passed after 1 attempt(s); the last (a) was "
                                      "rejected: called tool(s) that do not exist: ['nope']")
    assert rec["body"]["host"] is None and rec["body"]["tokens_used"] == 3


async def test_the_log_may_be_named_by_its_path_as_the_cli_takes_it(tmp_path: Path) -> None:
    # issue 44 §5: wal= takes what --wal-path takes; a path was kept as a str and failed at the write.
    with pytest.raises(CascadeExhausted):
        await cascade("x", ladder=[ScriptedTier("a", calls("nope", tokens=3))], verify=tools_must_exist(TOOLS),
                      wal=str(tmp_path / "run.wal"), saga_id="run-1")
    assert [r["type"] for r in read_records(tmp_path / "run.wal")] == ["CASCADE_EXHAUSTED"]


async def test_outside_a_saga_and_without_a_log_nothing_is_written() -> None:
    result = await cascade("x", ladder=[ScriptedTier("a", calls("send_email"))], verify=tools_must_exist(TOOLS))
    assert result.seq is None


async def test_graph_shows_the_verdict_line_rendered_inert(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "run.wal")
    # A tier whose name carries an escape sequence and a bidi override: the picture shows them escaped.
    sly = ScriptedTier("sly\x1b[2K\u202e", calls("send_emial", tokens=1))
    async with saga_scope(wal, name="billing"):
        await cascade("x", ladder=[sly, ScriptedTier("frontier", calls("send_email"))],
                      verify=tools_must_exist(TOOLS))
    wal.close()
    (saga,) = reconstruct(read_records(tmp_path / "run.wal"))
    (verdict,) = saga.verdicts
    assert verdict.type == "CASCADE_RESOLVED" and verdict.kind == "ok" and verdict.seq > 0
    assert verdict.label == "cascade resolved on frontier after 1 escalation(s)"
    mermaid, dot = to_mermaid([saga]), to_dot([saga])
    assert "cascade resolved on frontier after 1 escalation(s)" in mermaid
    assert "cascade resolved on frontier after 1 escalation(s)" in dot


@pytest.mark.slow
async def test_the_graph_and_verify_verbs_read_a_log_with_a_cascade_record(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "run.wal")
    async with saga_scope(wal, name="billing"):
        await cascade("x", ladder=[ScriptedTier("small", calls("send_emial")), ScriptedTier("frontier", calls())],
                      verify=tools_must_exist(TOOLS))
    wal.close()
    drawn = {}
    for fmt in ("mermaid", "dot"):
        out = subprocess.run([sys.executable, "-m", "agent_saga", "graph", "--wal", str(tmp_path / "run.wal"),
                              "--format", fmt], capture_output=True, text=True, timeout=60, check=True).stdout
        assert "cascade resolved on frontier after 1 escalation(s)" in out
        drawn[fmt] = out
    # the verdict's node is one that Mermaid's own parser and Graphviz accept
    mermaid = Path(__file__).parent / "mermaid"
    assert (mermaid / "node_modules" / "mermaid").is_dir(), "run `npm ci --prefix packages/core/tests/mermaid`"
    (tmp_path / "run.mmd").write_text(drawn["mermaid"])
    parsed = subprocess.run(["node", str(mermaid / "parse.mjs"), str(tmp_path / "run.mmd")], capture_output=True,
                            text=True, timeout=120, check=False)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    svg = subprocess.run(["dot", "-Tsvg"], input=drawn["dot"], capture_output=True, text=True, check=False)
    assert svg.returncode == 0 and "cascade resolved on frontier" in svg.stdout, svg.stderr
    verified = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal", str(tmp_path / "run.wal")],
                              capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_graph_shows_each_rejection_of_an_exhausted_ladder_inert() -> None:
    wal = MemoryWAL()
    # A tier's name is the developer's, but it is text all the same: it is shown inert.
    sly = ScriptedTier("sly\x1b[1A\u202e", calls("send_emial", tokens=1))
    async with saga_scope(wal, name="billing"):
        with pytest.raises(CascadeExhausted):
            await cascade("x", ladder=[sly], verify=tools_must_exist(TOOLS))
    (saga,) = reconstruct(wal.records())
    (verdict,) = saga.verdicts
    assert verdict.type == "CASCADE_EXHAUSTED" and verdict.kind == "bad"
    assert "the last (sly\x1b[1A\u202e) was rejected: called tool(s) that do not exist" in verdict.label
    for picture in (to_mermaid([saga]), to_dot([saga])):
        assert "\x1b" not in picture and "\u202e" not in picture
        assert "cascade exhausted: no tier passed after 1 attempt(s)" in picture
    assert "the last (sly\\x1b[1A\\u202e) was" in to_mermaid([saga])  # the escapes, visible


# -- the ladder's laws, over any ladder ------------------------------------------------------------


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=6))
async def test_any_ladder_returns_the_first_verified_answer_or_raises(spec: list[tuple[bool, int]]) -> None:
    ladder = [ScriptedTier(f"t{i}", calls("send_email" if ok else f"bad_{i}", tokens=n))
              for i, (ok, n) in enumerate(spec)]
    first_ok = next((i for i, (ok, _) in enumerate(spec) if ok), None)
    if first_ok is None:
        with pytest.raises(CascadeExhausted) as caught:
            await cascade("x", ladder=ladder, verify=tools_must_exist(TOOLS))
        assert caught.value.tokens_used == sum(n for _, n in spec)
        asked = len(spec)
    else:
        result = await cascade("x", ladder=ladder, verify=tools_must_exist(TOOLS))
        assert result.host == f"t{first_ok}" and result.escalations == first_ok
        assert result.tokens_used == sum(n for _, n in spec[: first_ok + 1])
        assert result.attempts[-1].ok and not any(a.ok for a in result.attempts[:-1])
        asked = first_ok + 1
    for i, tier in enumerate(ladder):
        # each tier asked once (up to the one that passed), told exactly its predecessor's fault
        expected = [] if i >= asked else [None if i == 0 else f"called tool(s) that do not exist: ['bad_{i - 1}']"]
        assert tier.feedback == expected


def test_the_record_body_is_json_the_log_can_hold() -> None:
    # A reason with a lone surrogate (a model can write one) is stored escaped, not refused.
    from agent_saga.runtime import Attempt

    entry = Attempt("t", 1, 0.1, False, "bad \udc80", TierAnswer("x\udc80")).as_record()
    from agent_saga.log.encodable import encodable

    json.dumps(encodable(entry)).encode()


# -- the flight recorder (`agent-saga ui`) --------------------------------------------------------


async def test_the_flight_recorder_serves_each_cascade_verdict_as_a_line_rendered_inert(tmp_path: Path) -> None:
    from test_ui_server import api, serving

    from agent_saga.ui import FileSource

    wal = FileWAL(tmp_path / "run.wal")
    async with saga_scope(wal, name="billing"):
        await cascade("x", ladder=[ScriptedTier("small", calls("send_emial")), ScriptedTier("frontier", calls())],
                      verify=tools_must_exist(TOOLS))
        with pytest.raises(CascadeExhausted):
            await cascade("y", ladder=[ScriptedTier("sly\x1b[2K\u202e", calls("rm_rf"))],
                          verify=tools_must_exist(TOOLS))
    wal.close()
    with serving(FileSource(tmp_path / "run.wal")) as server:
        (run,) = api(server, "api/runs")["runs"]
        detail = api(server, f"api/runs/{run['id']}")
    resolved, exhausted = detail["verdicts"]
    assert (resolved["type"], resolved["kind"]) == ("CASCADE_RESOLVED", "ok")
    assert resolved["label"] == "cascade resolved on frontier after 1 escalation(s)"
    assert (exhausted["type"], exhausted["kind"]) == ("CASCADE_EXHAUSTED", "bad")
    assert exhausted["label"] == ("cascade exhausted: no tier passed after 1 attempt(s); the last "
                                  "(sly\\x1b[2K\\u202e) was rejected: called tool(s) that do not exist: ['rm_rf']")
    briefs = [r["brief"] for r in detail["records"] if r["type"].startswith("CASCADE_")]
    assert briefs == [resolved["label"], exhausted["label"]]


# -- grounded(broker): the cascade escalates an answer that cannot prove its claims --------------


async def test_a_cascade_verified_by_grounding_escalates_an_uncited_answer_with_the_claim_named() -> None:
    from agent_saga import ContextBroker, grounded

    broker = ContextBroker()
    spans = broker.add_document("manual", "Safety. The pressure limit is 4200 kPa for the main vessel.")
    sid = broker.admit_summary("the pressure limit is 4200 kPa", spans)
    small = ScriptedTier("small", TierAnswer("The limit is 4200 kPa. It was installed in 2019, I believe.", (), 30))
    big = ScriptedTier("big", TierAnswer(f"The limit is 4200 kPa [{sid}].", (), 90))
    wal = MemoryWAL()
    async with saga_scope(wal, name="answering"):
        result = await cascade("what is the pressure limit?", ladder=[small, big], verify=grounded(broker))
    assert result.host == "big" and result.tokens_used == 120
    (feedback,) = big.feedback
    assert feedback is not None
    assert feedback.startswith("the answer is not fully grounded: 2 claim(s) not verified: ")
    assert "UNCITED: 'The limit is 4200 kPa.'" in feedback
    # Every grounding check is its own record, and the ladder is one more.
    kinds = [r["type"] for r in wal.records() if r["type"] in ("ANSWER_GROUNDED", "CASCADE_RESOLVED")]
    assert kinds == ["ANSWER_GROUNDED", "ANSWER_GROUNDED", "CASCADE_RESOLVED"]


async def test_grounded_rejects_an_answer_citing_a_summary_never_admitted_and_an_empty_one() -> None:
    from agent_saga import ContextBroker, grounded

    broker = ContextBroker()
    check = grounded(broker)
    verdict = await _judge(check, TierAnswer("The limit is 4200 kPa [s9]."))
    assert not verdict.ok and "BROKEN_CITATION: 'The limit is 4200 kPa [s9].'" in verdict.reason
    assert (await _judge(check, TierAnswer(""))).reason == "the answer is not fully grounded: it has no claim to verify"
