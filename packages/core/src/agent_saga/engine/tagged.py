"""Values that carry a claim of where they came from, as the engine sees them.

The runtime (``agent_saga.runtime._provenance``) tags an argument -- "this 4200 was
read from invoice-17, span 3" -- and the gate checks the claim. The engine's part
is small and lives here so the engine never imports the runtime: at the step's
door it takes the tags off. The tool is called with the plain value (it never
sees a wrapper), the gate's :class:`~agent_saga.engine.ports.StepRequest` gets
the tags beside the plain arguments, and the step's log record gets what each
tag claims (its level and receipt, never the document's text).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Tagged", "untag", "untag_args", "untag_call"]


class Tagged:
    """Base of every tagged value: ``value`` is what the tool gets."""

    __slots__ = ()

    @property
    def plain(self) -> Any:
        """The value the tool receives."""
        raise NotImplementedError

    def claim(self) -> dict[str, Any]:
        """What the tag claims, as the log holds it (a level and a receipt or request id; no text)."""
        raise NotImplementedError


def untag(value: Any) -> Any:
    """``value`` without its tag (a value that carries none is returned as it is)."""
    return value.plain if isinstance(value, Tagged) else value


def untag_args(args: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, Tagged]]:
    """The arguments with plain values, and the tags found (by argument name).

    Only top-level arguments are looked at: a tag inside a list or dict is not an
    argument's provenance, and is passed on as written.
    """
    tags = {name: value for name, value in args.items() if isinstance(value, Tagged)}
    if not tags:
        return args, tags  # the usual case: nothing copied
    return {name: untag(value) for name, value in args.items()}, tags


def untag_call(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` with tagged arguments replaced by their plain values.

    The front doors (``@guard``, a kit's tools, the adapters) hand the engine the
    call as a ``functools.partial`` over the arguments they also pass as ``args``;
    that call is rebuilt with the plain values. Any other callable is the caller's
    own closure and is returned unchanged.
    """
    if not isinstance(forward, functools.partial):
        return forward
    if not any(isinstance(v, Tagged) for v in forward.args) and not any(
        isinstance(v, Tagged) for v in forward.keywords.values()
    ):
        return forward
    return functools.partial(
        forward.func, *(untag(v) for v in forward.args), **{k: untag(v) for k, v in forward.keywords.items()}
    )
