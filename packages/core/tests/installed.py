"""Real (tiny) installed adapter distributions, and a fresh interpreter that sees them.

A dist-info directory with an ``agent_saga_adapters`` entry point and an extra naming the
framework range, next to the module it loads: what ``pip install agent-saga-<key>``
leaves behind, so discovery reads real metadata. Each scenario runs in a fresh
interpreter, so that nothing it imports or registers leaks into other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["install_adapter", "run_with"]


def install_adapter(site: Path, key: str, requires: str, module: str, code: str | None, target: str = "") -> None:
    """``agent-saga-<key>`` 0.1, its extra ``<key>`` requiring ``requires``, entry point ``target``.

    ``code`` (if given) is written as ``<module>.py``; ``target`` defaults to ``module``.
    """
    if code is not None:
        (site / f"{module}.py").write_text(code)
    info = site / f"agent_saga_{key}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: agent-saga-{key}\nVersion: 0.1\n"
        f"Provides-Extra: {key}\nRequires-Dist: {requires}; extra == \"{key}\"\n"
    )
    (info / "entry_points.txt").write_text(f"[agent_saga_adapters]\n{key} = {target or module}\n")
    (info / "RECORD").write_text("")


def run_with(site: Path, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` with ``site`` first on sys.path; its last printed line is JSON, returned."""
    script = f"import sys; sys.path.insert(0, {str(site)!r})\n" + textwrap.dedent(code)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SAGA")}
    full_env.update(env or {})
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=full_env, check=False)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
