"""What the adapter takes from CrewAI beyond its documented API (_compat) fails clearly when CrewAI moved."""

from __future__ import annotations

from agent_saga.testing import assert_moved_fails_at_import

#: What a refactor of crewai could do: run() calls the class's _run (quiet: no telemetry, no warnings).
MOVED = """
import os, warnings
os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true", CREWAI_TRACING_ENABLED="false")
warnings.simplefilter("ignore")
from crewai.tools import BaseTool
BaseTool.run = lambda self, *args, **kwargs: type(self)._run(self, *args, **kwargs)
"""


def test_an_install_whose_crewai_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_crewai", MOVED, "crewai<1.16,>=1.15.9 (installed: crewai 1.15",
                                 "no longer calls a tool's own _run from run() and from the CrewStructuredTool")
