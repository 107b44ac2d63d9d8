"""Regenerate the README's pictures from a real run of `agent-saga demo`.

    python3 -m tox exec -e ui -- python scripts/readme_assets.py      # writes docs/images/

* ``docs/images/demo-rollback.svg``: ``agent-saga animate`` of Act I's rollback;
* ``docs/images/flight-recorder.png``: ``agent-saga ui`` on the same log in headless
  Chromium (Debian's, driven by Playwright), Act I open and its newest undo inspected.

The demo runs for real each time, so the saga id (and the times shown) differ from
run to run; everything else is a function of what the demo did.
``packages/core/tests/browser/test_readme_assets.py`` regenerates both and fails when
they drift from the committed files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
ANIMATION = "demo-rollback.svg"
SCREENSHOT = "flight-recorder.png"
VIEWPORT = {"width": 1400, "height": 820}


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


def screenshot(log: Path, saga_name: str, path: Path, chromium: str) -> None:
    """The debugger on ``log``, with ``saga_name`` open and its newest undo in the inspector."""
    from playwright.sync_api import expect, sync_playwright

    from agent_saga.ui import FileSource, make_server

    server = make_server(FileSource(log), port=0)
    server.serve_in_thread()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(server.url)
            page.locator("#runs button", has_text=saga_name).click()
            page.locator("#unwind button").first.click()
            expect(page.locator("#inspect")).to_contain_text("idempotency key")
            page.mouse.move(0, VIEWPORT["height"] - 1)  # no hover highlight in the picture
            page.screenshot(path=str(path))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


def generate(out: Path, *, saga_name: str = "onboard-acme", chromium: str | None = None) -> str:
    """Write both pictures into ``out``; returns the id of the saga they show."""
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
            screenshot(log, saga_name, out / SCREENSHOT, chromium)
        finally:
            os.chdir(here)
    return saga_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: docs/images)")
    args = parser.parse_args()
    saga_id = generate(args.out)
    print(f"wrote {args.out / ANIMATION} and {args.out / SCREENSHOT} (saga {saga_id})")


if __name__ == "__main__":
    main()
