"""FailureModel (issue 28 part 4): lift over a per-tool base rate, silence below support, advisory only.

Every log here is written by real sagas on a FileWAL: tools that raise (an UNKNOWN outcome),
tools that say nothing happened (NotApplied), compensations of correct steps a later failure
rolled back (COLLATERAL), and a process that died mid-saga (a saga with no terminal record).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import Compensation, FailureModel, FileWAL, NotApplied, PreFlightGate, StepRefused, saga_scope
from agent_saga.errors import ConfigurationError
from agent_saga.gate import Action, Rule, tool_is
from agent_saga.gate._rules import evaluate_rules
from agent_saga.learning import Feature, Finding, Silence
from agent_saga.learning._failures import _decade, label_steps
from agent_saga.log import read_records
from agent_saga.recovery import fold
from agent_saga.registry import compensator, unregister
from agent_saga.semantics import ActionSemantics

pytestmark = pytest.mark.usefixtures("fresh_gate_globals")

UNDO = Compensation(handler="learning.undo", kwargs={})


@pytest.fixture(autouse=True)
def undo_handler() -> Iterator[list[Any]]:
    undone: list[Any] = []
    compensator("learning.undo")(lambda idempotency_key=None: undone.append(idempotency_key))
    yield undone
    unregister("learning.undo")


def run_saga(wal: FileWAL, calls: list[tuple[str, dict[str, Any], str]], gate: Any = None) -> None:
    """One saga of ``calls`` (tool, args, fate): fate "ok", "raise" (UNKNOWN) or "not-applied"."""

    def forward(fate: str) -> Any:
        def call() -> str:
            if fate == "raise":
                raise ConnectionError("the provider timed out")
            if fate == "not-applied":
                raise NotApplied("declined")
            return "done"

        return call

    try:
        with saga_scope(wal, gate=gate) as saga:
            for tool, args, fate in calls:
                saga.execute(tool=tool, semantics="COMPENSABLE", forward=forward(fate), args=args, compensate=UNDO)
    except Exception:  # the saga rolled back (or was refused): the log says how, and that is the data
        pass


CRASH = textwrap.dedent("""
    import os, sys
    from agent_saga import Compensation, FileWAL, saga_scope
    from agent_saga.registry import compensator
    compensator("learning.undo")(lambda idempotency_key=None: None)
    wal = FileWAL(sys.argv[1])
    with saga_scope(wal) as saga:
        saga.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: "done",
                     args={"amount": 5000, "currency": "EUR"},
                     compensate=Compensation(handler="learning.undo", kwargs={}))
        wal.barrier()
        os._exit(137)  # the process dies: no rollback, no terminal record
""")


def crash_a_saga(path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CRASH, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 137, done.stderr


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """The hand-counted log (numbers in test_lift_matches_the_hand_computed_case)."""
    path = tmp_path / "saga.wal"
    wal = FileWAL(path)
    try:
        big, small = {"amount": 5000, "currency": "EUR"}, {"amount": 50, "currency": "EUR"}
        # amount in [1e3, 1e4): 4 scored calls, 3 undone (two UNKNOWN, one NOT_APPLIED), 1 kept
        for fate in ("raise", "raise", "not-applied", "ok"):
            run_saga(wal, [("pay.charge", big, fate)])
        # amount in [1e1, 1e2): 4 scored calls, 1 undone; two of them carry a coupon
        for fate, coupon in (("raise", True), ("ok", True), ("ok", False), ("ok", False)):
            run_saga(wal, [("pay.charge", {**small, "coupon": "SPRING"} if coupon else small, fate)])
        # COLLATERAL: two big charges that worked, undone because shipping failed afterwards
        for _ in range(2):
            run_saga(wal, [("pay.charge", big, "ok"), ("ship.send", {"to": "depot"}, "raise")])
    finally:
        wal.close()
    return path


@pytest.fixture
def crashed(history: Path) -> Path:
    """``history`` and one more saga whose process died: a big charge committed, the saga never ended."""
    crash_a_saga(history)
    return history


@pytest.mark.slow
def test_the_log_holds_every_fate_the_model_must_tell_apart(crashed: Path) -> None:
    labels = [(tool, args.get("amount"), label) for _s, _i, tool, args, label in label_steps(read_records(crashed))]
    assert labels.count(("pay.charge", 5000, "UNDONE")) == 3
    assert labels.count(("pay.charge", 5000, "KEPT")) == 1
    assert labels.count(("pay.charge", 5000, "COLLATERAL")) == 2
    assert labels.count(("pay.charge", 5000, "UNRESOLVED")) == 1
    assert labels.count(("ship.send", None, "UNDONE")) == 2
    types = {r["type"] for r in read_records(crashed)}
    assert {"STEP_UNKNOWN", "STEP_NOT_APPLIED", "STEP_COMPENSATED"} <= types


@pytest.mark.slow
def test_a_crashed_saga_changes_no_number(history: Path) -> None:
    before = FailureModel.fit(read_records(history), min_support=4)
    crash_a_saga(history)  # UNRESOLVED: whether that charge stands is not known, so it is no evidence
    after = FailureModel.fit(read_records(history), min_support=4)
    assert [str(f) for f in after.findings()] == [str(f) for f in before.findings()]
    assert before.excluded("pay.charge") == {"COLLATERAL": 2}
    assert after.excluded("pay.charge") == {"COLLATERAL": 2, "UNRESOLVED": 1}


def test_lift_matches_the_hand_computed_case(history: Path) -> None:
    model = FailureModel.fit(read_records(history), min_support=4)
    # Scored pay.charge calls (COLLATERAL and the crashed saga's step are left out):
    #   8 calls, 4 undone (3 big + 1 small)  -> the tool's base rate 4/8 = 0.5
    #   amount in [1e3, 1e4): 3 of 4 undone  -> 0.75; lift 0.75 / 0.5 = 1.5
    #   amount in [1e1, 1e2): 1 of 4 undone  -> 0.25; lift 0.25 / 0.5 = 0.5
    # Counting the two COLLATERAL charges as kept would give (3/6)/(4/10) = 1.25 (a crashed saga's
    # charge as kept, (3/5)/(4/9) = 1.35: test_a_crashed_saga_changes_no_number).
    # The tool against every tool: ship.send 2 of 2, so 6 of 10 overall = 0.6; pay.charge 0.5 / 0.6 = 0.8333...
    found = {f.feature.describe(): f for f in model.findings("pay.charge")}
    big = found["amount in [1e3, 1e4)"]
    assert (big.undone, big.calls, big.base_undone, big.base_calls) == (3, 4, 4, 8)
    assert big.lift == pytest.approx(1.5)
    small = found["amount in [1e1, 1e2)"]
    assert (small.undone, small.calls) == (1, 4) and small.lift == pytest.approx(0.5)
    tool = found["any call"]
    assert (tool.undone, tool.calls, tool.base_undone, tool.base_calls) == (4, 8, 6, 10)
    assert tool.lift == pytest.approx(0.5 / 0.6)
    assert "currency = \"EUR\"" not in found  # every call has it: its rate is the base rate, nothing learned
    assert model.excluded("pay.charge") == {"COLLATERAL": 2}
    assert str(big) == (
        "pay.charge amount in [1e3, 1e4): 3 of 4 undone (75%) against 4 of 8 for the tool (50%): lift 1.50"
    )
    assert model.findings()[0] is not None and model.findings()[0].lift == pytest.approx(1.5)


def test_below_support_there_is_no_number_and_it_says_so(history: Path) -> None:
    model = FailureModel.fit(read_records(history), min_support=4)
    # ship.send: 2 scored calls < 4; "has coupon": 2 < 4; a decade never seen: 0 calls.
    assert model.findings("ship.send") == []
    coupon = {f.feature.describe(): f for f in model.findings() if f.feature.arg == "coupon"}
    assert list(coupon) == ["no coupon"]  # 6 calls without one (3 undone: lift 1.0); 2 with one: silent
    assert (coupon["no coupon"].calls, coupon["no coupon"].undone) == (6, 3)
    said = model.explain("pay.charge", {"amount": 50, "currency": "EUR", "coupon": "SPRING"})
    silent = {s.feature.describe(): s for s in said.silent}
    assert silent["has coupon"].calls == 2 and silent["has coupon"].needed == 4
    assert "silence is not a clean bill of health" in str(said)
    assert [f.feature.describe() for f in said.findings] == ["amount in [1e1, 1e2)", "any call"]
    assert sorted(silent) == ['coupon = "SPRING"', "has coupon"]
    unseen = model.explain("pay.charge", {"amount": 5_000_000})
    assert any(s.feature.describe() == "amount in [1e6, 1e7)" and s.calls == 0 for s in unseen.silent)
    stranger = model.explain("crm.delete", {"id": 1})
    assert not stranger.known and not stranger.findings
    assert "no scored call of this tool" in str(stranger) and "not a clean bill of health" in str(stranger)
    # Raising the bar silences everything: no number is ever printed below it.
    quiet = FailureModel.fit(read_records(history), min_support=9)
    assert quiet.findings() == []
    assert "no numbers; silence is not a clean bill of health" in str(quiet)


def test_json_lines_of_the_file_read_the_same_as_read_records(history: Path, tmp_path: Path) -> None:
    lines = [json.loads(line) for line in history.read_text(encoding="utf-8").splitlines() if line.strip()]
    a = FailureModel.fit(lines, min_support=4)
    b = FailureModel.fit(read_records(history), min_support=4)
    assert a.to_json() == b.to_json()
    a.save(tmp_path / "model.json")
    loaded = FailureModel.load(tmp_path / "model.json")
    assert loaded.to_json() == a.to_json()
    assert [str(f) for f in loaded.findings()] == [str(f) for f in a.findings()]


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigurationError, match="min_support must be a whole number"):
        FailureModel.fit([], min_support=0)
    with pytest.raises(TypeError, match=r"FailureModel\.fit: record 1 is a int, not a log record"):
        FailureModel.fit([1])
    with pytest.raises(ConfigurationError, match="not a failure model"):
        FailureModel.from_json({"tools": {}})


def test_the_advisory_rule_never_refuses_and_its_note_is_in_the_log(history: Path, tmp_path: Path) -> None:
    model = FailureModel.fit(read_records(history), min_support=4)
    path = tmp_path / "live.wal"
    wal = FileWAL(path)
    ran: list[str] = []
    try:
        gate = PreFlightGate(rules=[model.advisory_rule()], wal=wal)
        with saga_scope(wal, gate=gate) as saga:
            # The riskiest shape the model knows (lift 1.5), and a tool it has never seen.
            saga.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: ran.append("charge"),
                         args={"amount": 7000, "currency": "EUR"}, compensate=UNDO)
            saga.execute(tool="crm.note", semantics="REVERSIBLE", forward=lambda: ran.append("note"), args={"n": 1})
    finally:
        wal.close()
    assert ran == ["charge", "note"]
    records = list(read_records(path))
    assert not [r for r in records if r["type"] == "STEP_REFUSED"]
    assert [r["type"] for r in records if r["type"] == "SAGA_COMPLETED"] == ["SAGA_COMPLETED"]
    advisories = [r for r in records if r["type"] == "STEP_ADVISORY"]
    assert [(r["step"], r["body"]["tool"], r["body"]["rule"]) for r in advisories] == [
        (1, "pay.charge", "failure-model"), (2, "crm.note", "failure-model")]
    note = advisories[0]["body"]["note"]
    lifts = {f["describe"]: f["lift"] for f in note["findings"]}
    assert lifts["amount in [1e3, 1e4)"] == pytest.approx(1.5)
    assert note["base"] == "per tool" and "nothing was refused" in note["advisory"]
    stranger = advisories[1]["body"]["note"]
    assert stranger["unknown_tool"] is True and stranger["findings"] == []
    assert stranger["silence"] == "silence is not a clean bill of health"
    # The note sits before the step's own intent: the record of this step, not a later one.
    seq = {(r["type"], r.get("step")): r["seq"] for r in records}
    assert seq[("STEP_ADVISORY", 1)] < seq[("STEP_INTENT", 1)]


def test_an_advise_rule_needs_a_log_and_a_failing_note_refuses_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="pass wal="):
        PreFlightGate(rules=[Rule("hint", tool_is("x"), "advise")])
    with pytest.raises(ConfigurationError, match="note= is for then='advise'"):
        Rule("hint", tool_is("x"), "block", note=lambda r: {})

    def broken(request: Any) -> dict[str, Any]:
        raise RuntimeError("model file vanished")

    wal = FileWAL(tmp_path / "a.wal")
    try:
        gate = PreFlightGate(rules=[Rule("hint", tool_is("x"), "advise", note=broken)], wal=wal)
        with saga_scope(wal, gate=gate) as saga:
            assert saga.execute(tool="x", semantics="REVERSIBLE", forward=lambda: 7) == 7
    finally:
        wal.close()
    (advice,) = [r for r in read_records(tmp_path / "a.wal") if r["type"] == "STEP_ADVISORY"]
    assert advice["body"]["note"] == {"error": "RuntimeError: model file vanished"}


@given(semantics=st.sampled_from(list(ActionSemantics)), extra=st.sampled_from(["none", "block", "approve", "allow"]))
def test_an_advise_rule_never_changes_the_verdict(semantics: ActionSemantics, extra: str) -> None:
    from agent_saga.gate import StepRequest

    request = StepRequest("s", 1, "pay.charge", semantics, {"amount": 5})
    others = [] if extra == "none" else [Rule("other", tool_is("pay.*"), extra)]
    advise = Rule("hint", tool_is("*"), Action.ADVISE)
    with_advice = evaluate_rules([*others, advise], request)
    without = evaluate_rules(others, request)
    assert (with_advice.action, with_advice.rules) == (without.action, without.rules)
    assert with_advice.advice == (advise,)


def test_an_operator_can_turn_a_finding_into_an_explicit_rule_that_refuses(history: Path, tmp_path: Path) -> None:
    model = FailureModel.fit(read_records(history), min_support=4)
    (big,) = [f for f in model.findings("pay.charge") if f.feature.describe() == "amount in [1e3, 1e4)"]
    rule = big.as_rule()
    assert rule.then is Action.BLOCK and "lift 1.50" in rule.describe()
    wal = FileWAL(tmp_path / "ruled.wal")
    ran: list[int] = []
    try:
        gate = PreFlightGate(rules=[rule], wal=wal)
        run_saga(wal, [("pay.charge", {"amount": 50, "currency": "EUR"}, "ok")], gate=gate)
        with pytest.raises(Exception) as caught, saga_scope(wal, gate=gate) as saga:
            saga.execute(tool="pay.charge", semantics="COMPENSABLE", forward=lambda: ran.append(7000),
                         args={"amount": 7000}, compensate=UNDO)
    finally:
        wal.close()
    assert ran == []
    assert isinstance(caught.value, StepRefused) or isinstance(caught.value.__cause__, StepRefused)
    (refusal,) = [r for r in read_records(tmp_path / "ruled.wal") if r["type"] == "STEP_REFUSED"]
    assert refusal["body"]["rule"] == "learned:pay.charge:amount in [1e3, 1e4)"
    assert refusal["body"]["args"] == {"amount": 7000}


def test_free_text_is_no_category(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "t.wal")
    try:
        for n in range(22):  # 22 distinct notes > MAX_CATEGORIES (20): text, not a choice
            run_saga(wal, [("crm.note", {"text": f"call back {n}", "kind": "memo"}, "raise" if n % 2 else "ok")])
    finally:
        wal.close()
    model = FailureModel.fit(read_records(tmp_path / "t.wal"), min_support=1)
    kinds = {(f.feature.kind, f.feature.arg) for f in model.findings("crm.note")}
    assert ("category", "text") not in kinds
    said = model.explain("crm.note", {"text": "a note never seen", "kind": "letter"})
    assert [s.feature.describe() for s in said.silent] == ['kind = "letter"']  # the new choice, not the new text
    assert FailureModel.from_json(json.loads(json.dumps(model.to_json()))).explain(
        "crm.note", {"text": "a note never seen", "kind": "letter"}) == said


def test_printed_findings_are_inert(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "x.wal")
    try:
        run_saga(wal, [("crm.\x1b[2Kwipe", {"mode\u202e": "a\x1b[1Ab"}, "raise")])
        run_saga(wal, [("crm.\x1b[2Kwipe", {}, "ok")])
    finally:
        wal.close()
    model = FailureModel.fit(read_records(tmp_path / "x.wal"), min_support=1)
    text = str(model) + str(model.explain("crm.\x1b[2Kwipe", {"mode\u202e": "a\x1b[1Ab"}))
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b" in text and "\\u202e" in text


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fates=st.lists(st.tuples(st.sampled_from([3, 30, 300]), st.booleans()), min_size=1, max_size=12),
       min_support=st.integers(1, 5))
def test_every_number_is_the_count_of_what_the_sagas_did(
    tmp_path_factory: pytest.TempPathFactory, fates: list[tuple[int, bool]], min_support: int
) -> None:
    path = tmp_path_factory.mktemp("h") / "h.wal"
    wal = FileWAL(path)
    try:
        for amount, fails in fates:
            run_saga(wal, [("t", {"amount": amount}, "raise" if fails else "ok")])
    finally:
        wal.close()
    model = FailureModel.fit(read_records(path), min_support=min_support)
    total, bad = len(fates), sum(f for _a, f in fates)
    for finding in model.findings():
        amount = {"amount in [1e0, 1e1)": 3, "amount in [1e1, 1e2)": 30, "amount in [1e2, 1e3)": 300}.get(
            finding.feature.describe())
        mine = [f for a, f in fates if amount is None or a == amount]
        assert (finding.calls, finding.undone) == (len(mine), sum(mine))
        assert finding.calls >= min_support
        if finding.feature.kind != "tool":
            assert (finding.base_calls, finding.base_undone) == (total, bad)
            assert finding.lift == (None if bad == 0 else pytest.approx((sum(mine) / len(mine)) / (bad / total)))
    for amount in (3, 30, 300):
        n = sum(1 for a, _f in fates if a == amount)
        said = model.explain("t", {"amount": amount})
        if 0 < n < min_support:
            assert any(isinstance(s, Silence) and s.calls == n for s in said.silent)
            assert not any(f.feature.kind == "range" for f in said.findings)


@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers()).filter(lambda v: v != 0))
def test_a_decade_holds_its_number(value: float) -> None:
    decade = _decade(value)
    assert decade is not None
    sign, exp = decade
    assert sign == ("+" if value > 0 else "-")
    assert Decimal(10) ** exp <= abs(Decimal(value)) < Decimal(10) ** (exp + 1)  # exact, at any size
    assert Feature("range", "x", sign, exp).matches({"x": value})
    assert _decade(True) is None and _decade("5") is None and _decade(0) == ("0", 0)


def test_a_finding_round_trips_and_compares_with_its_base() -> None:
    finding = Finding("t", Feature("present", "coupon"), 4, 3, 8, 4)
    assert finding.lift == pytest.approx(1.5) and finding.base == "the tool"
    assert Finding("t", Feature("tool"), 4, 0, 8, 0).lift is None
    assert Feature.from_json(Feature("category", "c", True).to_json()) == Feature("category", "c", True)


CRASH_AFTER_ADVICE = textwrap.dedent("""
    import os, sys
    from agent_saga import FileWAL, PreFlightGate, saga_scope
    from agent_saga.gate import Rule, tool_is

    class DiesWhileAsked:
        def request_approval(self, request):
            wal.barrier()
            os._exit(137)  # the process dies while a human is asked: after the gate's note, before any intent

        async def request_approval_async(self, request):
            self.request_approval(request)

    wal = FileWAL(sys.argv[1])
    gate = PreFlightGate(rules=[Rule("hint", tool_is("*"), "advise")], wal=wal, approval_provider=DiesWhileAsked())
    with saga_scope(wal, gate=gate) as saga:
        saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: None, args={"amount": 9})
""")


@pytest.mark.slow
def test_an_advisory_alone_is_not_a_step_that_ran(tmp_path: Path) -> None:
    # The fold the daemon and `graph` read: a note about a step that never reached its intent
    # must not become a step whose outcome is "unknown" (nothing ran).
    path = tmp_path / "c.wal"
    done = subprocess.run([sys.executable, "-c", CRASH_AFTER_ADVICE, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 137, done.stderr
    records = list(read_records(path))
    assert [r["type"] for r in records if r.get("step") == 1] == ["STEP_ADVISORY"]
    (saga,) = fold(records).values()
    assert saga.steps == {}
    assert label_steps(records) == []
