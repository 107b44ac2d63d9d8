"""What the adapter takes from AutoGen beyond its documented API (_compat) fails clearly when AutoGen moved."""

from __future__ import annotations

from agent_saga.testing import assert_moved_fails_at_import


def test_an_install_whose_autogen_moved_fails_at_import_naming_the_supported_range() -> None:
    out = assert_moved_fails_at_import("agent_saga_autogen", "from autogen_core.tools import FunctionTool; rename_on_init(FunctionTool, '_func')",
                                       "", "no longer calls a FunctionTool's function as _func")
    supported, _, installed = out.partition(" (installed: ")
    assert "autogen-core<0.8,>=0.6.2" in supported and "autogen-agentchat<0.8,>=0.6.2" in supported
    assert "autogen-core 0.7" in installed.split(")")[0]
