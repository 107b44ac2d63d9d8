"""Regenerate the README's pictures from a real run of `agent-saga demo`.

    python3 -m tox exec -e ui -- python scripts/readme_assets.py      # writes docs/images/

* ``docs/images/demo-rollback.svg``: ``agent-saga animate`` of Act I's rollback;
* ``docs/images/flight-recorder.png``: ``agent-saga ui`` on the same log in headless
  Chromium (Debian's, driven by Playwright), Act I open and its newest undo inspected.

The demo runs for real each time, so the saga id (and the times shown) differ from
run to run; everything else is a function of what the demo did.
``packages/core/tests/browser/test_readme_assets.py`` regenerates both and fails when
they drift from the committed files. The screenshot is taken once the page says it is
settled (no request in flight, no error shown, no replay, the step inspected), and the
boxes of the text that differs per run are handed back so that a comparison can set
exactly those aside.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
ANIMATION = "demo-rollback.svg"
SCREENSHOT = "flight-recorder.png"
VIEWPORT = {"width": 1400, "height": 820}
#: A box of the page, in CSS pixels: x, y, width, height.
Box = tuple[float, float, float, float]
# What a fresh run of the demo shows differently (its saga id, its times, its record count,
# its operation ids and idempotency keys): the elements holding only that.
VOLATILE = """() => [...document.querySelectorAll("#live, #run-meta, #runs .meta"),
  ...[...document.querySelectorAll("#inspect dt")].filter((dt) => ["operation id", "idempotency key"]
    .includes(dt.textContent)).map((dt) => dt.nextElementSibling)]
  .map((e) => e.getBoundingClientRect()).map((r) => [r.x, r.y, r.width, r.height])"""
# The page is settled: every request answered, no error shown, no replay running, the step
# wanted in the inspector, and the fonts loaded. A screenshot before that shows a state
# in passing (a replay frame differed from the end state in 10-15% of the pixels).
SETTLED = """([name, step]) => document.fonts.status === "loaded"
  && document.body.dataset.requests === "0" && document.getElementById("error").hidden
  && document.getElementById("replay-status").textContent === ""
  && !!document.querySelector('#runs button[aria-current="true"]')?.textContent.startsWith(name)
  && document.querySelector("#inspect h3")?.textContent === step"""


def run_demo(workdir: Path) -> Path:
    """`agent-saga demo` in ``workdir``; returns the log, as a path relative to ``workdir``."""
    env = dict(os.environ, AGENT_SAGA_HOME=str(workdir / ".home"))
    env.pop("AGENT_SAGA_WAL", None)
    subprocess.run([sys.executable, "-m", "agent_saga", "demo"], cwd=workdir, env=env,
                   check=True, capture_output=True, timeout=180)
    return Path("agent-saga.wal")  # the demo's log is the default log of the directory it ran in


def animation(log: Path, saga_name: str) -> tuple[str, str]:
    """The animated SVG of the saga called ``saga_name``, and that saga's id."""
    from agent_saga.log import read_records
    from agent_saga.ui import reconstruct, render_animation

    saga = next(s for s in reconstruct(read_records(log)) if s.name == saga_name)
    return render_animation(saga), saga.saga_id


def screenshot(log: Path, saga_name: str, path: Path, chromium: str, css: str = "") -> list[Box]:
    """The debugger on ``log``, with ``saga_name`` open and its newest undo in the inspector.

    Returns the boxes of the elements that show what differs per run (``VOLATILE``).
    ``css`` is added to the page's own style (a test changes the page with it).
    """
    from playwright.sync_api import expect, sync_playwright

    from agent_saga.ui import FileSource, make_server

    server = make_server(FileSource(log), port=0)
    server.serve_in_thread()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport=VIEWPORT)
            if css:  # appended to the served stylesheet: the page's policy forbids inline style
                page.route("**/app.css", lambda route: route.fulfill(
                    response=(served := route.fetch()), body=served.text() + "\n" + css))
            page.goto(server.url)
            page.locator("#runs button", has_text=saga_name).click()
            page.locator("#unwind button").first.click()
            expect(page.locator("#inspect")).to_contain_text("idempotency key")
            step = page.locator("#inspect h3").first.text_content()
            page.mouse.move(0, VIEWPORT["height"] - 1)  # no hover highlight in the picture
            page.wait_for_function(SETTLED, arg=[saga_name, step], polling="raf")
            page.screenshot(path=str(path), animations="disabled", caret="hide")
            boxes = page.evaluate(VOLATILE)
            browser.close()
            return [tuple(b) for b in boxes]
    finally:
        server.shutdown()
        server.server_close()


class Pictures(NamedTuple):
    saga_id: str  # of the saga both pictures show
    volatile: list[Box]  # the screenshot's boxes that show what differs per run


def generate(out: Path, *, saga_name: str = "onboard-acme", chromium: str | None = None, css: str = "") -> Pictures:
    """Write both pictures into ``out``."""
    chromium = chromium or os.environ.get("AGENT_SAGA_TEST_CHROMIUM") or shutil.which("chromium") or ""
    if not os.path.exists(chromium):
        raise SystemExit("Chromium is not installed: apt-get install chromium (or set AGENT_SAGA_TEST_CHROMIUM)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        here = os.getcwd()
        os.chdir(tmp)  # the page shows the log's path: keep it the same short one every time
        try:
            log = run_demo(Path(tmp))
            svg, saga_id = animation(log, saga_name)
            (out / ANIMATION).write_text(svg, encoding="utf-8")
            boxes = screenshot(log, saga_name, out / SCREENSHOT, chromium, css)
        finally:
            os.chdir(here)
    return Pictures(saga_id, boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: docs/images)")
    args = parser.parse_args()
    saga_id = generate(args.out).saga_id
    print(f"wrote {args.out / ANIMATION} and {args.out / SCREENSHOT} (saga {saga_id})")


if __name__ == "__main__":
    main()
