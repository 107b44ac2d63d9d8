"""What the adapter takes from AutoGen beyond its documented API (_compat) fails clearly when AutoGen moved."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_an_install_whose_autogen_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from autogen_core.tools import FunctionTool
        original = FunctionTool.__init__

        def renamed(self, func, *args, **kwargs):  # what a refactor of autogen-core could do
            original(self, func, *args, **kwargs)
            self._callable = self.__dict__.pop("_func")

        FunctionTool.__init__ = renamed
        try:
            import agent_saga_autogen
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    supported, _, installed = out.partition(" (installed: ")
    assert supported.startswith("agent-saga-autogen supports ")
    assert "autogen-core<0.8,>=0.6.2" in supported and "autogen-agentchat<0.8,>=0.6.2" in supported
    assert "autogen-core 0.7" in installed.split(")")[0]
    assert "no longer calls a FunctionTool's function as _func" in out
    assert out.rstrip().endswith("pip install 'agent-saga-autogen[autogen]>=3.0.0'")
