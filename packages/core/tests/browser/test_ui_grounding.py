"""The flight recorder in headless Chromium shows an answer's grounding verdict as a line of its run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from agent_saga import FileWAL, ground, saga_scope
from agent_saga.runtime import ContextBroker
from agent_saga.ui import UiServer


def test_the_grounding_verdict_is_a_visible_line_and_agent_text_stays_inert(
    page: Page, serve: Callable[..., UiServer], tmp_path: Path
) -> None:
    broker = ContextBroker()
    sid = broker.admit_summary("the pressure limit is 4200 kPa",
                               broker.add_document("runbook", "The pressure limit is 4200 kPa."))
    wal = FileWAL(tmp_path / "g.wal")
    with saga_scope(wal, name="answer-desk\u202e"):
        ground(f"The limit is 4200 kPa [{sid}]. It was installed in 2019, I believe.", broker)
    wal.close()
    server = serve(tmp_path / "g.wal")
    page.goto(server.url)
    page.locator("#runs button", has_text="answer-desk").click()
    line = page.locator("#run-verdicts li")
    expect(line).to_have_count(1)
    expect(line).to_contain_text("ANSWER_GROUNDED")
    expect(line).to_contain_text("answer: 1 of 2 claim(s) VERIFIED, 1 UNCITED - NOT fully grounded")
    assert "bad" in (line.get_attribute("class") or "")
    assert "\u202e" not in page.locator("body").inner_text()
