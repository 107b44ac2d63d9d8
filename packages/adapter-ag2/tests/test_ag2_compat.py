"""What the adapter takes from AG2 beyond its documented API (_compat) fails clearly when AG2 moved."""

from __future__ import annotations

from agent_saga.testing import assert_moved_fails_at_import


def test_an_install_whose_ag2_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_ag2", "from autogen.tools import Tool; rename_on_init(Tool, '_func')",
                                 "ag2<0.15,>=0.12.0 (installed: ag2 0.1", "no longer has Tool._func, Tool._chat_context_param_names or ConversableAgent._run_async_in_thread")
