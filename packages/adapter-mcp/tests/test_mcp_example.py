"""examples/mcp_trip.py, run as a user runs it (`python examples/mcp_trip.py`) where this adapter is installed."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from agent_saga.testing import assert_trip_undone


@pytest.mark.skipif(metadata.version("mcp").startswith("1."), reason="the example is written for mcp 2.x "
                    "(MCPServer, Client), which the [mcp] extra installs; the mcp1 env has 1.x")
def test_the_example_books_the_trip_and_undoes_it_each_time_it_runs(tmp_path: Path) -> None:
    # The server answers the declined charge with an error result: the protocol cannot say whether
    # the tool acted, so that step stays UNKNOWN and the report cannot say clean.
    out = assert_trip_undone("mcp_trip", tmp_path, clean=False)
    assert "?? UNRESOLVED step 3 charge_card [UNKNOWN]" in out
