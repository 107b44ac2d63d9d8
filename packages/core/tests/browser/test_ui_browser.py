"""The flight recorder in headless Chromium: it renders, lists, filters, inspects, replays, follows."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from resumed_log import resumed_run
from viz_logs import DEMO_TOOLS, write_mixed_log

from agent_saga import FileWAL, saga_scope
from agent_saga.log import read_records
from agent_saga.ui import UiServer

Shot = Callable[[Page, str], Path]
Serve = Callable[..., UiServer]


@pytest.fixture
def demo_copy(demo_log: Path, tmp_path: Path) -> Path:
    return Path(shutil.copy(demo_log, tmp_path / "demo.wal"))


def open_run(page: Page, name: str) -> None:
    page.locator("#runs button", has_text=name).click()
    expect(page.locator("#run-title")).to_contain_text(name)


def open_run_of(page: Page, serve: Serve, log: Path, name: str) -> None:
    """The debugger on ``log`` in ``page``, with its run ``name`` open."""
    page.goto(serve(log).url)
    open_run(page, name)


def test_the_page_lists_the_demo_runs_and_names_its_tools(page: Page, serve: Serve, demo_copy: Path, shot: Shot) -> None:
    server = serve(demo_copy)
    page.goto(server.url)
    expect(page.locator("#runs button")).to_have_count(4)
    expect(page.locator("#chain")).to_have_text("chain: intact")
    text = page.locator("body").inner_text()
    for tool in DEMO_TOOLS:
        assert tool in text, tool
    for name in ("onboard-acme", "pay-supplier", "runaway-agent", "checkout-worker"):
        assert name in text
    shot(page, "runs")


def test_how_long_a_run_lasted_moves_nothing_below_it(page: Page, serve: Serve, demo_copy: Path) -> None:
    # The README's screenshot is compared to the pixel outside the text that differs per run: a
    # duration of 111.1 ms instead of 72.2 ms wrapped the run's line and moved 12% of the pixels.
    open_run_of(page, serve, demo_copy, "onboard-acme")
    below = page.locator("#watch").bounding_box()
    page.evaluate("state.detail.ended_us = state.detail.started_us + 1234.56e6; renderRun()")
    expect(page.locator("#run-meta")).to_contain_text("lasted 1234.56 s")
    assert page.locator("#watch").bounding_box() == below


def test_filters_show_runs_by_status(page: Page, serve: Serve, tmp_path: Path) -> None:
    log = write_mixed_log(tmp_path / "mixed.wal")
    server = serve(log)
    page.goto(server.url)
    expect(page.locator("#runs button")).to_have_count(5)
    expected = {"dirty": ["orphan", "partial"], "open": ["crashed"], "clean": ["clean-one"],
                "completed": ["fine"], "all": ["crashed", "fine", "orphan", "partial", "clean-one"]}
    for status, names in expected.items():
        page.locator(f"input[name=filter][value={status}]").check()
        buttons = page.locator("#runs button .name")
        expect(buttons).to_have_count(len(names))
        assert buttons.all_inner_texts() == names
        expect(page.locator("#run-count")).to_have_text(f"{len(names)} of 5 run(s) shown")


def test_opening_a_step_shows_the_compensation_that_ran(page: Page, serve: Serve, demo_copy: Path, shot: Shot) -> None:
    key = next(r["body"]["key"] for r in read_records(demo_copy)
               if r["type"] == "STEP_COMPENSATED" and r["step"] == 3)
    open_run_of(page, serve, demo_copy, "onboard-acme")
    unwind = page.locator("#unwind button")
    assert unwind.evaluate_all("bs => bs.map(b => b.dataset.step)") == ["3", "2", "1"]  # LIFO
    for button in unwind.all():
        assert button.get_attribute("data-outcome") == "compensated"
        expect(button).to_contain_text("compensated")  # the colour is never the only cue
    unwind.first.click()
    inspector = page.locator("#inspect")
    expect(inspector).to_contain_text("Step 3: jira.create_issue")
    expect(inspector).to_contain_text("COMPENSABLE")
    expect(inspector).to_contain_text("demo.undo(target='ticket ONB-7')")
    expect(inspector).to_contain_text(key)
    expect(inspector).to_contain_text("seq 12 STEP_COMPENSATED")
    shot(page, "inspector")


def test_arguments_show_references_and_redactions_never_secrets(page: Page, serve: Serve, tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "s.wal")
    with saga_scope(wal, name="with-secrets") as s:
        s.execute(tool="pay.charge", semantics="IRREVERSIBLE", forward=lambda: 1,
                  args={"amount": 5, "api_key": "sk-live-SECRET1", "credential_ref": "vault://stripe/prod"})
    wal.close()
    open_run_of(page, serve, tmp_path / "s.wal", "with-secrets")
    page.locator("#forward button").first.click()
    rows = page.locator("#inspect table.args tr[data-kind]")
    expect(rows).to_have_count(3)
    expect(page.locator("#inspect tr[data-kind=redacted]")).to_contain_text("api_key")
    expect(page.locator("#inspect tr[data-kind=redacted] .badge")).to_have_text("redacted")
    expect(page.locator("#inspect tr[data-kind=reference]")).to_contain_text("vault://stripe/prod")
    expect(page.locator("#inspect tr[data-kind=reference] .badge")).to_have_text("reference")
    assert "SECRET1" not in page.content()


def test_a_resumed_run_marks_the_steps_served_from_the_log(page: Page, serve: Serve, tmp_path: Path) -> None:
    # Issue 41 part 8: the steps a resume took from the log, apart from the ones it ran; a city named
    # like markup, from the log, stays text.
    served, live = resumed_run(tmp_path / "r.wal", ["paris", '<img src=x onerror="alert(1)">', "oslo"])
    open_run_of(page, serve, tmp_path / "r.wal", "marks.trip")
    forward = page.locator("#forward button")
    expect(forward).to_have_count(len(served) + len(live))
    marks = forward.evaluate_all("bs => bs.map(b => [Number(b.dataset.step), b.dataset.served, b.textContent])")
    assert {step for step, flag, _ in marks if flag == "true"} == served
    assert {step for step, flag, _ in marks if flag == "false"} == live
    assert all(("served from the log" in text) == (flag == "true") for _, flag, text in marks)
    page.locator("#forward button[data-step='3']").click()  # think about the markup city: served
    inspector = page.locator("#inspect")
    expect(inspector).to_contain_text("served from the log: nothing ran")
    expect(inspector).to_contain_text('<img src=x onerror="alert(1)">')
    assert page.locator("img").count() == 0
    page.locator("#forward button[data-step='5']").click()  # oslo, run live
    expect(inspector).to_contain_text("Step 5: think")
    expect(inspector).not_to_contain_text("served from the log")


def test_watch_from_start_replays_the_run_to_its_verdict(page: Page, serve: Serve, demo_copy: Path, shot: Shot) -> None:
    open_run_of(page, serve, demo_copy, "onboard-acme")
    expect(page.locator("#verdict-text")).to_have_text("rollback clean")
    page.locator("#watch").click()
    page.locator("#pause").click()
    # stopped near the start: the run has not ended yet, and the page says so
    expect(page.locator("#verdict-text")).to_contain_text("OPEN - no end record")
    expect(page.locator("#replay-status")).to_contain_text(" of 17: seq ")
    assert page.locator("#unwind button").count() == 0
    page.locator("#step-fwd").click()
    page.locator("#to-end").click()
    expect(page.locator("#replay-status")).to_contain_text("record 17 of 17")
    expect(page.locator("#replay-status")).to_contain_text("end of the run: rollback clean")
    expect(page.locator("#verdict-text")).to_have_text("rollback clean")
    # and played through, unattended, from the first record to the verdict
    page.locator("#speed").select_option("4")
    page.locator("#watch").click()
    expect(page.locator("#replay-status")).to_contain_text("record 1 of 17")
    expect(page.locator("#replay-status")).to_contain_text("end of the run: rollback clean", timeout=30_000)
    expect(page.locator("#verdict-text")).to_have_text("rollback clean")
    expect(page.locator("#unwind button")).to_have_count(3)
    shot(page, "replayed")


def test_new_runs_appear_while_the_log_grows(page: Page, serve: Serve, tmp_path: Path) -> None:
    path = tmp_path / "live.wal"
    wal = FileWAL(path)
    try:
        with saga_scope(wal, name="first") as s:
            s.execute(tool="a.read", semantics="REVERSIBLE", forward=lambda: 1)
        wal.barrier()
        server = serve(path)
        page.goto(server.url)
        expect(page.locator("#runs button")).to_have_count(1)
        open_run(page, "first")
        with saga_scope(wal, name="arrived-later") as s:
            s.execute(tool="b.write", semantics="REVERSIBLE", forward=lambda: 1)
        wal.barrier()
        expect(page.locator("#runs button")).to_have_count(2)
        expect(page.locator("#runs button").first).to_contain_text("arrived-later")
        expect(page.locator("#run-title")).to_contain_text("first")  # the open run stays open
    finally:
        wal.close()


def test_everything_works_from_the_keyboard(page: Page, serve: Serve, demo_copy: Path) -> None:
    server = serve(demo_copy)
    page.goto(server.url)
    expect(page.locator("#runs button")).to_have_count(4)
    page.locator("#runs button").first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    page.keyboard.press("Enter")  # the oldest run: Act I
    expect(page.locator("#run-title")).to_contain_text("onboard-acme")
    page.locator("#unwind button").first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(page.locator("#inspect")).to_contain_text("Step 2: pinecone.create_namespace")
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")  # where the focus is can be seen
    page.keyboard.press("Shift+Tab")  # Tab order reaches the replay controls
    for _ in range(12):
        if page.evaluate("() => document.activeElement.id") == "watch":
            break
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("() => document.activeElement.id") == "watch"
    page.keyboard.press("Enter")
    expect(page.locator("#replay-status")).to_contain_text(" of 17")


CONTRAST = """() => {
  const lum = (c) => { const v = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map((x) => x / 255)
      .map((x) => x <= 0.04045 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4);
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const background = (el) => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
      if (c && !c.startsWith("rgba(0, 0, 0, 0)") && c !== "transparent") return c; } return "rgb(255, 255, 255)"; };
  const worst = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el.offsetParent && el.tagName !== "BODY") continue;
    const a = lum(getComputedStyle(el).color), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) worst.push([n.textContent.trim().slice(0, 40), ratio]);
  }
  return worst;
}"""


def test_every_text_meets_wcag_aa_contrast(page: Page, serve: Serve, tmp_path: Path) -> None:
    log = write_mixed_log(tmp_path / "mixed.wal")
    server = serve(log)
    page.goto(server.url)
    for name in ("partial", "orphan", "crashed", "clean-one", "fine"):
        open_run(page, name)
        page.locator("#forward button").first.click()
        assert page.evaluate(CONTRAST) == [], name


def test_log_text_is_shown_as_text_never_run_as_markup(page: Page, serve: Serve, tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "x.wal")
    hostile = "<img src=x onerror=\"document.title='pwned'\">"
    with saga_scope(wal, name="<b>bold</b>") as s:
        s.execute(tool=hostile, semantics="REVERSIBLE", forward=lambda: 1)
    wal.close()
    server = serve(tmp_path / "x.wal")
    page.goto(server.url)
    expect(page.locator("#runs button")).to_contain_text("<b>bold</b>")
    open_run(page, "<b>bold</b>")
    expect(page.locator("#forward")).to_contain_text(hostile)
    assert page.locator("img").count() == 0 and page.locator("#runs b").count() == 0
    assert page.title() == "agent-saga flight recorder"


def test_a_token_protected_server_works_from_its_printed_url(browser, page: Page, serve: Serve,  # type: ignore[no-untyped-def]
                                                             demo_copy: Path) -> None:
    token = "browser-" + "k" * 24
    server = serve(demo_copy, token=token)
    stranger = browser.new_context().new_page()  # without the token (its 401s are expected here)
    stranger.goto(server.url)
    expect(stranger.locator("#error")).to_contain_text("needs its bearer token")
    expect(stranger.locator("#runs button")).to_have_count(0)
    stranger.context.close()
    page.goto(server.url + f"#token={token}")
    expect(page.locator("#runs button")).to_have_count(4)
    assert "token" not in page.url  # taken out of the address bar at once
    expect(page.locator("#error")).to_be_hidden()


def test_the_animation_fires_newest_first_and_respects_reduced_motion(browser, demo_log: Path,  # type: ignore[no-untyped-def]
                                                                     tmp_path: Path) -> None:
    from agent_saga.ui import reconstruct, render_animation

    saga = next(s for s in reconstruct(read_records(demo_log)) if s.name == "runaway-agent")
    svg = tmp_path / "a.svg"
    svg.write_text(render_animation(saga))
    visible = """(t) => { for (const a of document.getAnimations()) { a.pause(); a.currentTime = t; }
      return [...document.querySelectorAll('g[data-outcome]')]
        .filter((g) => Number(getComputedStyle(g).opacity) > 0.5).map((g) => g.dataset.step); }"""
    context = browser.new_context()
    try:
        pg = context.new_page()
        pg.goto(svg.as_uri())
        total = pg.evaluate("() => document.getAnimations()[0].effect.getTiming().duration")
        seen = [pg.evaluate(visible, total * f / 100) for f in (*range(0, 100, 2), 99.9)]
        order = []
        for frame in seen:
            order.extend(s for s in frame if s not in order)
        assert order == ["5", "4", "3", "2", "1"]
        assert seen[0] == [] and sorted(seen[-1]) == ["1", "2", "3", "4", "5"]
        calm = browser.new_context(reduced_motion="reduce").new_page()
        calm.goto(svg.as_uri())
        assert calm.evaluate("() => document.getAnimations().length") == 0
        shown = calm.evaluate("() => [...document.querySelectorAll('g[data-outcome]')]"
                              ".filter((g) => getComputedStyle(g).opacity === '1').length")
        assert shown == 5  # the final frame, at once
        calm.context.close()
    finally:
        context.close()


def test_the_api_answers_the_page_as_json(page: Page, serve: Serve, demo_copy: Path) -> None:
    server = serve(demo_copy)
    response = page.request.get(server.url + "api/runs")
    assert response.ok and response.headers["content-type"].startswith("application/json")
    assert len(json.loads(response.body())["runs"]) == 4


def test_what_the_agent_wrote_is_shown_escaped_and_cannot_reorder_the_page(page: Page, serve: Serve,
                                                                            tmp_path: Path) -> None:
    # issue 25 item 2: a bidi override or an ESC sequence in a name, a tool or an argument is drawn as
    # visible escapes; the run is opened (by the id the page was served) and its step inspected.
    evil = "\x1b[2K\u202eevil\u200b\u2066x"
    shown = "\\x1b[2K\\u202eevil\\u200b\\u2066x"
    wal = FileWAL(tmp_path / "evil.wal")
    with saga_scope(wal, name="n" + evil, saga_id="s" + evil) as s:
        s.execute(tool="pay" + evil, semantics="IRREVERSIBLE", args={"memo": evil}, forward=lambda: 1)
    wal.close()
    open_run_of(page, serve, tmp_path / "evil.wal", "n" + shown)
    page.locator("#forward button").first.click()
    expect(page.locator("#inspect")).to_contain_text("pay" + shown)
    expect(page.locator("#inspect")).to_contain_text(shown)
    text = page.locator("body").inner_text()
    assert "s" + shown in text
    acting = [f"U+{ord(c):04X}" for c in text if c in "\x1b\u202e\u200b\u2066"]
    assert acting == []


def test_each_step_shows_the_framework_it_came_from_as_text(page: Page, serve: Serve, tmp_path: Path) -> None:
    # The origin an adapter records with each step (issue 44 §11): a column of the forward
    # timeline and a line of the inspector; what a framework name holds is drawn, never run.
    hostile = "<img src=x onerror=\"document.title='pwned'\">\u202e"
    wal = FileWAL(tmp_path / "origin.wal")
    with saga_scope(wal, name="mixed") as s:
        s.execute(tool="search", semantics="REVERSIBLE", forward=lambda: 1, origin="langgraph")
        s.execute(tool="book", semantics="REVERSIBLE", forward=lambda: 2, origin=hostile)
        s.execute(tool="note", semantics="REVERSIBLE", forward=lambda: 3)
    wal.close()
    open_run_of(page, serve, tmp_path / "origin.wal", "mixed")
    origins = page.locator("#forward button .origin")
    expect(origins).to_have_count(2)  # the step no framework made has none
    assert origins.all_inner_texts() == ["langgraph", hostile.replace("\u202e", "\\u202e")]
    page.locator("#forward button").first.click()
    expect(page.locator("#inspect dl")).to_contain_text("framework")
    expect(page.locator("#inspect dl")).to_contain_text("langgraph")
    assert page.locator("img").count() == 0 and page.title() == "agent-saga flight recorder"


def write_long_run(path: Path, steps: int) -> None:
    """One saga of ``steps`` compensable steps that rolls back: 4 * steps + 3 records."""
    saga = "5a" * 16
    with FileWAL(path, linger=0.05) as wal:
        wal.append("SAGA_STARTED", saga, {"name": "long-run", "owner": "t:1", "lease_ttl": 30.0})
        for n in range(1, steps + 1):
            comp = {"handler": "stripe.refund", "kwargs": {"charge": f"ch_{n}"}, "key": f"k.{n}", "recoverable": True}
            wal.append("STEP_INTENT", saga, {"tool": "stripe.charge", "semantics": "COMPENSABLE", "op": f"op-{n}",
                                             "args": {"amount": n}, "compensation": comp}, n)
            wal.append("STEP_COMMITTED", saga, {"op": f"op-{n}", "compensation": comp}, n)
        wal.append("ROLLBACK_STARTED", saga, {"cause": "asked"})
        for n in range(steps, 0, -1):
            wal.append("COMPENSATION_STARTED", saga, {"attempt": 1, "key": f"k.{n}"}, n)
            wal.append("STEP_COMPENSATED", saga, {"key": f"k.{n}"}, n)
        wal.append("SAGA_ROLLED_BACK", saga, {})


def test_a_long_run_replays_page_by_page_to_its_verdict(page: Page, serve: Serve, tmp_path: Path) -> None:
    # 1,500 steps: 6,003 frames, served in pages of at most 2,000, fetched as the replay needs them;
    # the timelines draw 300 steps around the one in focus and count the rest
    write_long_run(tmp_path / "long.wal", 1500)
    open_run_of(page, serve, tmp_path / "long.wal", "long-run")
    expect(page.locator("#unwind button")).to_have_count(300)
    expect(page.locator("#unwind .elided")).to_have_text(["1200 step(s) below not drawn"])
    expect(page.locator("#records li")).to_have_count(2001)
    expect(page.locator("#records li").last).to_contain_text("4003 later record(s) not drawn")
    page.locator("#watch").click()
    page.locator("#pause").click()
    expect(page.locator("#replay-status")).to_contain_text(" of 6003: seq ")
    expect(page.locator("#verdict-text")).to_contain_text("OPEN - no end record")
    page.locator("#to-end").click()  # past the first page: the page fetches the other two
    expect(page.locator("#replay-status")).to_contain_text("record 6003 of 6003")
    expect(page.locator("#replay-status")).to_contain_text("end of the run: rollback clean")
    expect(page.locator("#verdict-text")).to_have_text("rollback clean")
    # the last step recorded is step 1's refund: the window shows the oldest steps
    expect(page.locator("#forward button").first).to_contain_text("1. stripe.charge")
    expect(page.locator("#forward .elided")).to_have_text(["1200 step(s) below not drawn"])
    expect(page.locator("#unwind .elided")).to_have_text(["1200 step(s) above not drawn"])
    expect(page.locator("#unwind button.o-compensated")).to_have_count(300)
    # back one record: the end record not yet written, every charge may still stand
    page.locator("#step-back").click()
    expect(page.locator("#replay-status")).to_contain_text("record 6002 of 6003")
    expect(page.locator("#verdict-text")).to_contain_text("OPEN - no end record (1500 effect(s) may be standing)")
    expect(page.locator("#unwind button.o-unresolved")).to_have_count(0)
    # and three more: step 2's refund and step 1's are not recorded yet
    for _ in range(3):
        page.locator("#step-back").click()
    expect(page.locator("#replay-status")).to_contain_text("record 5999 of 6003")
    expect(page.locator("#unwind button.o-unresolved")).to_have_count(2)
    expect(page.locator("#unwind button.o-compensated")).to_have_count(298)


def test_a_provenance_refusal_shows_its_rule_reason_and_the_claim(page: Page, serve: Serve, tmp_path: Path) -> None:
    # issue 26 part 1: the inspector names rule `provenance` and its reason, and each tagged
    # argument's claim (level and receipt), never the document's text.
    from agent_saga import ContextBroker, PreFlightGate, ProvenancePolicy, SagaAborted, StepRefused, sourced

    broker = ContextBroker()
    spans = broker.add_document("invoice-17", "Invoice 17.\n\nTotal due: 4,200.00 EUR.")
    policy = ProvenancePolicy().require("stripe.charge", "amount", "SOURCED")
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    wal = FileWAL(tmp_path / "prov.wal")
    with pytest.raises((StepRefused, SagaAborted)), saga_scope(wal, name="made-up-amount", gate=gate) as s:
        s.execute(tool="stripe.charge", semantics="IRREVERSIBLE", args={"amount": sourced(4300, spans[1])},
                  forward=lambda: 1)
    wal.close()
    open_run_of(page, serve, tmp_path / "prov.wal", "made-up-amount")
    page.locator("#forward button").first.click()
    inspector = page.locator("#inspect")
    expect(inspector).to_contain_text("refused by")
    expect(inspector).to_contain_text(
        f"provenance: argument 'amount' must be SOURCED or higher, verified MODEL: 4300 is not in the span "
        f"{spans[1].receipt}")
    expect(inspector).to_contain_text("Provenance")
    expect(inspector).to_contain_text(f"SOURCED invoice-17[{spans[1].start}:{spans[1].end}]")
    assert "Total due" not in page.content()


def test_each_cascade_verdict_is_a_visible_line_shown_as_text(page: Page, serve: Serve, tmp_path: Path) -> None:
    import asyncio
    import threading

    from agent_saga import CascadeExhausted, TierAnswer, ToolCall, cascade, tools_must_exist

    class Tier:
        def __init__(self, name: str, tool: str) -> None:
            self.name, self.tool = name, tool

        async def complete(self, request: object, feedback: str | None = None) -> TierAnswer:
            return TierAnswer("", (ToolCall(self.tool),), 10)

    async def run() -> None:
        wal = FileWAL(tmp_path / "c.wal")
        async with saga_scope(wal, name="cascading"):
            await cascade("x", ladder=[Tier("small", "send_emial"), Tier("frontier", "send_email")],
                          verify=tools_must_exist(["send_email"]))
            try:
                await cascade("y", ladder=[Tier("<b>sly</b>\u202e", "<img src=x>")],
                              verify=tools_must_exist(["send_email"]))
            except CascadeExhausted:
                pass
        wal.close()

    # the page's own event loop is Playwright's: the log is written on a thread of its own
    writer = threading.Thread(target=asyncio.run, args=(run(),))
    writer.start()
    writer.join()
    open_run_of(page, serve, tmp_path / "c.wal", "cascading")
    lines = page.locator("#run-verdicts li")
    expect(lines).to_have_count(2)
    expect(lines.nth(0)).to_contain_text("CASCADE_RESOLVED \u2014 cascade resolved on frontier after 1 escalation(s)")
    expect(lines.nth(0)).to_have_class("verdict-line ok")
    expect(lines.nth(1)).to_contain_text("the last (<b>sly</b>\\u202e) was rejected: called tool(s) that do not "
                                         "exist: ['<img src=x>']")
    expect(lines.nth(1)).to_have_class("verdict-line bad")
    assert page.locator("img").count() == 0 and page.locator("#run-verdicts b").count() == 0


def test_the_inspector_shows_a_repair_request_and_a_thrash_stop(page: Page, serve: Serve, tmp_path: Path) -> None:
    from agent_saga import PreFlightGate, RepairPolicy, RepairRequested, SagaAborted, ThrashPolicy

    def charge(amount: int) -> int:
        return amount

    wal = FileWAL(tmp_path / "r.wal")
    gate = PreFlightGate(repair=RepairPolicy({"charge": charge}), thrash=ThrashPolicy(max_identical=2))
    with pytest.raises(SagaAborted), saga_scope(wal, name="thrashing", gate=gate) as s:
        with pytest.raises(RepairRequested):
            s.execute(tool="charge", semantics="REVERSIBLE", forward=lambda: 1, args={"amount": "<b>lots</b>"})
        for _ in range(2):
            s.execute(tool="charge", semantics="REVERSIBLE", forward=lambda: 1, args={"amount": 3})
    wal.close()
    open_run_of(page, serve, tmp_path / "r.wal", "thrashing")
    page.locator("#forward button").first.click()
    expect(page.locator("#inspect")).to_contain_text("repair requested: amount: got '<b>lots</b>', needs int")
    page.locator("#forward button").nth(2).click()
    expect(page.locator("#inspect")).to_contain_text("THRASH STOPPED (identical)")
    assert page.locator("#inspect b").count() == 0  # the model's markup is text, never markup
