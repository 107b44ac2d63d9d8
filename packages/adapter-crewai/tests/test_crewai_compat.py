"""What the adapter takes from CrewAI beyond its documented API (_compat) fails clearly when CrewAI moved."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_an_install_whose_crewai_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("ignore")
        from crewai.tools import BaseTool

        def run(self, *args, **kwargs):  # what a refactor of crewai could do: call the class's _run
            return type(self)._run(self, *args, **kwargs)

        BaseTool.run = run
        try:
            import agent_saga_crewai
        except ImportError as err:
            print(err)
    """)
    env = {**os.environ, "CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true", "CREWAI_TRACING_ENABLED": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.startswith("agent-saga-crewai supports crewai<1.16,>=1.15.9 (installed: crewai 1.15")
    assert "no longer calls a tool's own _run from run() and from the CrewStructuredTool" in out
    assert out.rstrip().endswith("pip install 'agent-saga-crewai[crewai]>=3.0.0'")
