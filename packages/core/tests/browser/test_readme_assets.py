"""The README's pictures are what `scripts/readme_assets.py` makes from a real demo run today.

The animation is compared byte for byte, once the saga id (random per run) is set
aside: its layout and timing are a function of the log alone. The screenshot is
compared pixel by pixel once the boxes showing what a fresh run shows differently
(its saga id, its times, its record count, its operation ids and idempotency keys:
about 1% of the pixels) are set aside in both pictures; what remains matched to the
pixel in 7 regenerations with a CPU hog on each core. Two things made it move before:
the run's line wrapped when the demo, slowed by load, lasted 100 ms or more (12% of the
pixels; the page now gives the times a line of their own), and a picture taken when a
step was clicked rather than when the page says it is settled could catch a replay
frame or an error line in passing (10-22%).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "readme_assets.py"
#: Share of pixels allowed to differ (by more than 16 of 255 in grey) from the committed screenshot,
#: outside the boxes of per-run text.
DRIFT_LIMIT = 0.0005


def load_script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("readme_assets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_assets"] = module
    spec.loader.exec_module(module)
    return module


def drift(a: Path, b: Path, volatile: Sequence[Sequence[float]] = ()) -> float:
    """The share of pixels that differ visibly between two screenshots (1.0 if their sizes differ).

    The ``volatile`` boxes (x, y, width, height) are painted over in both first.
    """
    one, two = Image.open(a).convert("L"), Image.open(b).convert("L")
    if one.size != two.size:
        return 1.0
    for x, y, w, h in volatile:
        box = (math.floor(x), math.floor(y), math.ceil(x + w), math.ceil(y + h))
        one.paste(0, box)
        two.paste(0, box)
    changed = ImageChops.difference(one, two).point(lambda v: 255 if v > 16 else 0).histogram()[255]
    return changed / (one.size[0] * one.size[1])


def without_id(svg: str, saga_id: str) -> str:
    return svg.replace(saga_id, "<saga id>").replace(saga_id[:8], "<saga id>")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("assets")
    pictures = load_script().generate(out)
    print(f"regenerated README pictures: {out}")
    return out, pictures


def test_the_readme_shows_both_pictures() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/images/demo-rollback.svg" in readme and "docs/images/flight-recorder.png" in readme


def test_the_animation_has_not_drifted(fresh: tuple[Path, Any]) -> None:
    out, pictures = fresh
    saga_id = pictures.saga_id
    committed = (ROOT / "docs" / "images" / "demo-rollback.svg").read_text()
    old_id = committed.split('data-saga="')[1].split('"')[0]
    new = without_id((out / "demo-rollback.svg").read_text(), saga_id)
    assert new == without_id(committed, old_id), (
        "docs/images/demo-rollback.svg is stale: run `python3 -m tox exec -e ui -- python scripts/readme_assets.py`")


def test_the_screenshot_has_not_drifted(fresh: tuple[Path, Any], record_property) -> None:  # type: ignore[no-untyped-def]
    out, pictures = fresh
    record_property("screenshot", str(out / "flight-recorder.png"))
    share = drift(ROOT / "docs" / "images" / "flight-recorder.png", out / "flight-recorder.png", pictures.volatile)
    print(f"screenshot drift: {share:.4f} of the pixels (limit {DRIFT_LIMIT})")
    assert share < DRIFT_LIMIT, (
        f"docs/images/flight-recorder.png is stale ({share:.1%} of its pixels changed): run "
        "`python3 -m tox exec -e ui -- python scripts/readme_assets.py`")


def test_the_screenshot_comparison_can_say_no(tmp_path: Path) -> None:
    # The same page with another run open must count as drift, or the check above proves nothing.
    pictures = load_script().generate(tmp_path, saga_name="runaway-agent")
    share = drift(ROOT / "docs" / "images" / "flight-recorder.png", tmp_path / "flight-recorder.png", pictures.volatile)
    assert share > 5 * DRIFT_LIMIT


@pytest.mark.parametrize("css", [
    ".inspector dt { color: var(--ink); }",  # the inspector's labels as bright as its values
    ".timeline button { padding-top: 8px; }",  # two pixels more in each step of the timeline
])
def test_a_small_change_of_the_page_counts_as_drift(tmp_path: Path, css: str) -> None:
    pictures = load_script().generate(tmp_path, css=css)
    share = drift(ROOT / "docs" / "images" / "flight-recorder.png", tmp_path / "flight-recorder.png", pictures.volatile)
    assert share > DRIFT_LIMIT, f"{css!r} moved only {share:.4%} of the pixels"
