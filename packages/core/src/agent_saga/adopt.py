"""``DECIDE``: the semantics a person has not chosen yet, in a module ``agent-saga adopt`` wrote.

Whether an effect can be undone is the judgement the whole engine rests on, and a
plausible default there is the most expensive kind of wrong (an emailer quietly
marked COMPENSABLE looks protected and is not). So ``agent-saga adopt`` writes every
tool as ``DECIDE``, and the module calls :func:`require_decided`, which raises
:class:`Undecided` -- the module cannot be imported -- until each one is classified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agent_saga.errors import ConfigurationError
from agent_saga.semantics import ActionSemantics

__all__ = ["DECIDE", "Undecided", "require_decided"]


class Undecided(ConfigurationError):
    """A tool's semantics is still DECIDE (or not one of the three)."""


class _Decide:
    """The sentinel: not a semantics, and refused wherever one is expected."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DECIDE"


DECIDE: Final = _Decide()


def require_decided(semantics: Mapping[str, Any], where: str = "this module") -> dict[str, ActionSemantics]:
    """Every tool's semantics, parsed; raises :class:`Undecided` naming each one not decided."""
    undecided = [name for name, value in semantics.items() if value is DECIDE]
    if undecided:
        raise Undecided(
            f"{where}: {len(undecided)} tool(s) still have semantics=DECIDE: {', '.join(undecided)}. "
            "Replace each DECIDE with REVERSIBLE, COMPENSABLE or IRREVERSIBLE; only a person who knows "
            "what the tool does can tell whether its effect can be undone"
        )
    decided: dict[str, ActionSemantics] = {}
    for name, value in semantics.items():
        try:
            decided[name] = ActionSemantics.parse(value)
        except ConfigurationError as err:
            raise Undecided(f"{where}: {name}: {err}") from None
    return decided
