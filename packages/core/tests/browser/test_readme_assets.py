"""The README's pictures are what `scripts/readme_assets.py` makes from a real demo run today.

The animation is compared byte for byte, once the saga id (random per run) is set
aside: its layout and timing are a function of the log alone. The screenshot is
compared pixel by pixel with a tolerance, because a fresh run differs in its saga
id, its times and its idempotency keys (under 1% of the pixels on this machine
kind), while any change of layout, colour or content moves far more (opening
another run changes over 20%).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageChops

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "readme_assets.py"
#: Share of pixels allowed to differ (by more than 16 of 255 in grey) from the committed screenshot.
DRIFT_LIMIT = 0.03


def load_script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("readme_assets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_assets"] = module
    spec.loader.exec_module(module)
    return module


def drift(a: Path, b: Path) -> float:
    """The share of pixels that differ visibly between two screenshots (1.0 if their sizes differ)."""
    one, two = Image.open(a).convert("L"), Image.open(b).convert("L")
    if one.size != two.size:
        return 1.0
    changed = ImageChops.difference(one, two).point(lambda v: 255 if v > 16 else 0).histogram()[255]
    return changed / (one.size[0] * one.size[1])


def without_id(svg: str, saga_id: str) -> str:
    return svg.replace(saga_id, "<saga id>").replace(saga_id[:8], "<saga id>")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("assets")
    saga_id = load_script().generate(out)
    print(f"regenerated README pictures: {out}")
    return out, saga_id


def test_the_readme_shows_both_pictures() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docs/images/demo-rollback.svg" in readme and "docs/images/flight-recorder.png" in readme


def test_the_animation_has_not_drifted(fresh: tuple[Path, str]) -> None:
    out, saga_id = fresh
    committed = (ROOT / "docs" / "images" / "demo-rollback.svg").read_text()
    old_id = committed.split('data-saga="')[1].split('"')[0]
    new = without_id((out / "demo-rollback.svg").read_text(), saga_id)
    assert new == without_id(committed, old_id), (
        "docs/images/demo-rollback.svg is stale: run `python3 -m tox exec -e ui -- python scripts/readme_assets.py`")


def test_the_screenshot_has_not_drifted(fresh: tuple[Path, str], record_property) -> None:  # type: ignore[no-untyped-def]
    out, _ = fresh
    record_property("screenshot", str(out / "flight-recorder.png"))
    share = drift(ROOT / "docs" / "images" / "flight-recorder.png", out / "flight-recorder.png")
    print(f"screenshot drift: {share:.4f} of the pixels (limit {DRIFT_LIMIT})")
    assert share < DRIFT_LIMIT, (
        f"docs/images/flight-recorder.png is stale ({share:.1%} of its pixels changed): run "
        "`python3 -m tox exec -e ui -- python scripts/readme_assets.py`")


def test_the_screenshot_comparison_can_say_no(tmp_path: Path) -> None:
    # The same page with another run open must count as drift, or the check above proves nothing.
    load_script().generate(tmp_path, saga_name="runaway-agent")
    assert drift(ROOT / "docs" / "images" / "flight-recorder.png", tmp_path / "flight-recorder.png") > 5 * DRIFT_LIMIT
