"""What the adapter takes from Semantic Kernel beyond its documented API (_compat) fails clearly when it moved."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_an_install_whose_semantic_kernel_moved_fails_at_import_naming_the_supported_range() -> None:
    code = textwrap.dedent("""
        from semantic_kernel.kernel import Kernel

        def construct_call_stack(self, kind, inner):  # what a refactor of semantic-kernel could do
            raise NotImplementedError

        Kernel.construct_call_stack = construct_call_stack
        try:
            import agent_saga_semantic_kernel
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("agent-saga-semantic-kernel supports semantic-kernel<1.46,>=1.26.1 (installed: semantic-kernel 1.")
    assert "or Kernel.construct_call_stack(filter_type, inner_function) has changed" in out
    assert out.rstrip().endswith("pip install 'agent-saga-semantic-kernel[semantic-kernel]>=3.0.0'")
