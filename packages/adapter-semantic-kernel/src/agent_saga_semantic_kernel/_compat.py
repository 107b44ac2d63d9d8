"""Every touch of Semantic Kernel beyond its documented API, in one place, checked at import.

* The parameters Semantic Kernel fills by name (``kernel``, ``service``,
  ``execution_settings``, ``arguments``; ``KernelFunctionFromMethod.gather_function_parameters``):
  values of the invocation, not the model's arguments, so never logged.
* ``Kernel.construct_call_stack(filter_type, inner_function)``, where every kernel builds its
  function-invocation pipeline: ``patch_all()`` puts the saga filter innermost there.

If the installed semantic-kernel no longer looks like this, importing the adapter fails
here, naming the supported range.
"""

from __future__ import annotations

import inspect
from typing import Any

from semantic_kernel.exceptions import KernelException
from semantic_kernel.filters.functions.function_invocation_context import FunctionInvocationContext
from semantic_kernel.functions import KernelArguments, kernel_function
from semantic_kernel.functions.kernel_function_from_method import KernelFunctionFromMethod
from semantic_kernel.kernel import Kernel

from agent_saga.adapter import check_compat

__all__ = ["FILLED", "arguments"]

#: Parameters of a kernel function that Semantic Kernel fills from the invocation.
FILLED = frozenset({"kernel", "service", "execution_settings", "arguments"})


def arguments(context: FunctionInvocationContext) -> dict[str, Any]:
    """The model's arguments of one invocation, by the function's parameter names."""
    given = context.arguments
    return {p.name: given[p.name] for p in context.function.parameters if p.name and p.name in given and p.name not in FILLED}


def _fits() -> bool:
    @kernel_function
    def probe(kernel: Kernel, arguments: KernelArguments) -> None:
        """Probe."""

    function = KernelFunctionFromMethod(probe)
    kernel, given = Kernel(), KernelArguments()
    try:
        filled = function.gather_function_parameters(
            FunctionInvocationContext.model_construct(function=function, kernel=kernel, arguments=given)
        )
    except KernelException:  # semantic-kernel's own "cannot build or fill that function": it moved
        return False
    return (
        filled.get("kernel") is kernel and filled.get("arguments") is given
        and list(inspect.signature(Kernel.construct_call_stack).parameters) == ["self", "filter_type", "inner_function"]
    )


check_compat(
    "agent-saga-semantic-kernel", "semantic_kernel", _fits,
    "semantic-kernel no longer fills a kernel function's kernel/arguments parameters by name, "
    "or Kernel.construct_call_stack(filter_type, inner_function) has changed",
)
