"""A small JSONPath subset, for policies that point into arguments and results.

``$`` is the whole value; ``.name``, ``['name']`` and ``[0]`` step into it. Used by
tool policies (``compensate.args``, ``policy_args``) and by step options, so it lives
below every layer that reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["JsonPath", "is_path"]

_TOKEN = re.compile(r"""\.(?P<name>[A-Za-z_][A-Za-z0-9_-]*)|\[(?P<index>\d+)\]|\[(?P<q>['"])(?P<key>.*?)(?P=q)\]""")


def is_path(value: Any) -> bool:
    """Whether ``value`` is written as a JSON path (a string starting with ``$``)."""
    return isinstance(value, str) and value.startswith("$")


@dataclass(frozen=True, slots=True)
class JsonPath:
    """A small JSONPath subset: ``$``, ``.name``, ``['name']``, ``[0]``."""

    text: str
    steps: tuple[str | int, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        if not text.startswith("$"):
            raise ValueError(f"a JSON path starts with '$', got {text!r}")
        steps: list[str | int] = []
        pos = 1
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise ValueError(
                    f"cannot read JSON path {text!r} at position {pos} ({text[pos:]!r}); use "
                    "$.field, $['field'] or $.list[0]"
                )
            if match["name"] is not None:
                steps.append(match["name"])
            elif match["index"] is not None:
                steps.append(int(match["index"]))
            else:
                steps.append(match["key"])
            pos = match.end()
        return cls(text, tuple(steps))

    def find(self, value: Any) -> Any:
        """The value at this path; KeyError naming the missing step otherwise."""
        current: Any = value
        for step in self.steps:
            try:
                indexable = (isinstance(step, int) and isinstance(current, (list, tuple))) or isinstance(
                    current, Mapping
                )
                if indexable:
                    current = cast(Any, current)[step]
                elif isinstance(step, str) and hasattr(current, step):
                    current = getattr(current, step)
                else:
                    raise KeyError(step)
            except (KeyError, IndexError, TypeError):
                raise KeyError(f"{self.text}: no {step!r} in {type(current).__name__} {current!r:.200}") from None
        return current


