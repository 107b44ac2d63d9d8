"""What the adapter takes from Semantic Kernel beyond its documented API (_compat) fails clearly when it moved."""

from __future__ import annotations

from agent_saga.testing import assert_moved_fails_at_import

#: What a refactor of semantic-kernel could do: construct_call_stack with another signature.
MOVED = """
from semantic_kernel.kernel import Kernel

def construct_call_stack(self, kind, inner):
    raise NotImplementedError

Kernel.construct_call_stack = construct_call_stack
"""


def test_an_install_whose_semantic_kernel_moved_fails_at_import_naming_the_supported_range() -> None:
    assert_moved_fails_at_import("agent_saga_semantic_kernel", MOVED, "semantic-kernel<1.46,>=1.26.1 (installed: semantic-kernel 1.",
                                 "or Kernel.construct_call_stack(filter_type, inner_function) has changed")
