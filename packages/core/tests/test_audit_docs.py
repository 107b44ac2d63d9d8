"""Every Python example in docs/AUDIT.md runs, in order, as written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "AUDIT.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_audit_guide_has_examples() -> None:
    assert len(blocks()) >= 8


@pytest.mark.slow
def test_every_example_in_the_audit_guide_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    has_crypto = importlib.util.find_spec("cryptography") is not None
    namespace: dict[str, object] = {"__name__": "audit_doc"}
    ran = 0
    for number, code in enumerate(blocks(), start=1):
        needs_crypto = "audit.signing" in code or "log.crypto" in code or "signer=" in code or "SigningKey" in code
        if needs_crypto and not has_crypto:
            continue  # the [encryption] extra is not installed here
        try:
            exec(compile(code, f"{DOC.name} example {number}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"example {number} of {DOC.name} failed: {err!r}\n{code}") from err
        ran += 1
    assert ran >= 6
    out = capsys.readouterr().out
    assert "chain: intact" in out
    assert "BROKEN at seq 3" in out
