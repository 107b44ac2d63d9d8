"""What ``patch_all()`` installs for Semantic Kernel: ``Kernel.construct_call_stack``.

Every kernel builds its function-invocation pipeline there; the patched version puts
``saga_filter`` innermost, right around the function, in every kernel that does not
already have it. So the step sees the function's own result and exception, and the
user's filters run around it as before.
"""

from __future__ import annotations

import functools
from typing import Any

import wrapt
from semantic_kernel.filters.filter_types import FilterTypes
from semantic_kernel.kernel import Kernel

from agent_saga.plugins.patching import Patches
from agent_saga_semantic_kernel.filtering import is_installed, saga_filter

__all__ = ["patch", "unpatch"]

_patches = Patches()


def _construct(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    options = dict(kwargs)
    names = ("filter_type", "inner_function")
    options.update(zip(names, args, strict=False))
    kind = options.get("filter_type")
    if instance is None or FilterTypes(kind) is not FilterTypes.FUNCTION_INVOCATION or is_installed(instance):
        return wrapped(*args, **kwargs)
    options["inner_function"] = functools.partial(saga_filter, next=options["inner_function"])
    return wrapped(**options)


def patch() -> list[str]:
    _patches.apply(Kernel, "construct_call_stack", lambda original: wrapt.FunctionWrapper(original, _construct))
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
