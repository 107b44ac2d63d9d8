"""What the adapter takes from AG2 beyond its documented API (_compat) fails clearly when AG2 moved."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_an_install_whose_ag2_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from autogen.tools import Tool
        original = Tool.__init__

        def renamed(self, *args, **kwargs):  # what a refactor of ag2 could do
            original(self, *args, **kwargs)
            self._callable = self.__dict__.pop("_func")

        Tool.__init__ = renamed
        try:
            import agent_saga_ag2
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-ag2 supports ag2<0.15,>=0.12.0 (installed: ag2 0.1")
    assert "no longer has Tool._func, Tool._chat_context_param_names or ConversableAgent._run_async_in_thread" in out
    assert out.rstrip().endswith("pip install 'agent-saga-ag2[ag2]>=3.0.0'")
