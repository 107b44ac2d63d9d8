"""The fast lane's example count reaches every property test, including those that want more."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import hypothesis_profiles
import pytest
from hypothesis import HealthCheck, settings
from hypothesis_profiles import FAST_EXAMPLES, examples

TESTS = Path(__file__).parent


def test_no_core_test_pins_its_own_example_count() -> None:
    # A literal max_examples= in @settings overrides the loaded profile, so the fast lane would run
    # that test's full count: each such test must go through examples(n).
    pinned = []
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        if "max_examples" not in text:  # no such keyword in the file: parsing it finds nothing
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "settings":
                pinned += [f"{path.relative_to(TESTS)}:{node.lineno}" for kw in node.keywords
                           if kw.arg == "max_examples" and isinstance(kw.value, ast.Constant)]
    assert not pinned, f"max_examples pinned by a literal (write examples(n) instead): {pinned}"


def test_the_lane_loads_its_profile() -> None:
    fast = os.environ.get("AGENT_SAGA_FAST_LANE") == "1"
    loaded, expected = hypothesis_profiles.PROFILE, "fast" if fast else "ci"
    assert loaded == expected
    assert settings.default.max_examples == (FAST_EXAMPLES if fast else 100)
    assert settings.default.deadline is None  # no property test fails because the machine is busy
    assert HealthCheck.too_slow in settings.default.suppress_health_check


def test_examples_caps_the_count_in_the_fast_profile_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hypothesis_profiles, "PROFILE", "fast")
    assert (examples(300), examples(FAST_EXAMPLES), examples(5)) == (FAST_EXAMPLES, FAST_EXAMPLES, 5)
    monkeypatch.setattr(hypothesis_profiles, "PROFILE", "ci")
    assert (examples(300), examples(5)) == (300, 5)
