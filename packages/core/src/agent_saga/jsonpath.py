"""A small JSONPath subset, for policies that point into arguments and results.

``$`` is the whole value; ``.name``, ``['name']`` and ``[0]`` step into it; ``[*]`` steps
into every item of an array, so the path yields the array of what it finds there. Used by
tool policies (``compensate.args``, ``policy_args``) and by step options, so it lives below
every layer that reads it.

:class:`ArgTemplate` is the value of an undo's arguments: JSON in which any string, at any
depth, may be a reference: ``$...`` reads the forward call's result, ``$args...`` the call's
own arguments, and ``$$...`` is the literal string with one ``$`` less.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

__all__ = ["ARGS", "EACH", "RESULT", "ArgTemplate", "JsonPath", "Unresolved"]

_TOKEN = re.compile(
    r"""\.(?P<name>[A-Za-z_][A-Za-z0-9_-]*)|\[(?P<index>\d+)\]|\[(?P<each>\*)\]|\[(?P<q>['"])(?P<key>.*?)(?P=q)\]"""
)

#: The roots of a reference in an :class:`ArgTemplate`: the forward result, the call's arguments.
RESULT: Final = "$"
ARGS: Final = "$args"


class _Each:
    """The ``[*]`` step: every item of an array."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "[*]"


EACH: Final = _Each()
_UNKNOWN: Final = object()  # the call's arguments, where they are not known


@dataclass(frozen=True, slots=True)
class JsonPath:
    """A small JSONPath subset: ``$``, ``.name``, ``['name']``, ``[0]``, ``[*]``.

    ``root`` is what the text starts with (``$``, or ``$args`` in an undo's arguments).
    """

    text: str
    steps: tuple[str | int | _Each, ...]
    root: str = RESULT

    @classmethod
    def parse(cls, text: str, root: str = RESULT) -> JsonPath:
        if not text.startswith(root):
            raise ValueError(f"a JSON path starts with {root!r}, got {text!r}")
        steps: list[str | int | _Each] = []
        pos = len(root)
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise ValueError(
                    f"cannot read JSON path {text!r} at position {pos} ({text[pos:]!r}); use "
                    f"{root}.field, {root}['field'], {root}.list[0] or {root}.list[*].field"
                )
            if match["name"] is not None:
                steps.append(match["name"])
            elif match["index"] is not None:
                steps.append(int(match["index"]))
            elif match["each"] is not None:
                steps.append(EACH)
            else:
                steps.append(match["key"])
            pos = match.end()
        return cls(text, tuple(steps), root)

    @property
    def reads_result(self) -> bool:
        """Whether this is a reference to the forward result (``$``), not to the call's arguments."""
        return self.root == RESULT

    @property
    def fans_out(self) -> bool:
        """Whether the path has a ``[*]`` step, so it yields an array."""
        return EACH in self.steps

    def find(self, value: Any) -> Any:
        """The value at this path; KeyError naming the missing step otherwise.

        After a ``[*]`` step the rest of the path is read in every item, and the values
        found make one flat array, in order (``$.a[*].b[*]`` lists every ``b`` of every ``a``).
        """
        return self._walk(value, 0)

    def _walk(self, current: Any, start: int) -> Any:
        for at in range(start, len(self.steps)):
            step = self.steps[at]
            if isinstance(step, _Each):
                if not isinstance(current, (list, tuple)):
                    raise KeyError(f"{self.text}: [*] needs an array, got {type(current).__name__} {current!r:.200}")
                more = EACH in self.steps[at + 1:]
                found: list[Any] = []
                for item in current:
                    value = self._walk(item, at + 1)
                    if more:
                        found.extend(value)
                    else:
                        found.append(value)
                return found
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


class Unresolved(KeyError):
    """A reference of an :class:`ArgTemplate` that does not resolve: where it is, its path, and why."""

    def __init__(self, where: str, path: JsonPath, why: str) -> None:
        super().__init__(f"{where} = {path.text!r}: {why}")
        self.where = where
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return str(self.args[0])


def _reference(text: str) -> JsonPath | str:
    """What one string of a template is: a path, or (``$$...`` and plain text) a literal."""
    if not text.startswith("$"):
        return text
    if text.startswith("$$"):
        return text[1:]
    if text == ARGS or text.startswith((ARGS + ".", ARGS + "[")):
        return JsonPath.parse(text, ARGS)
    return JsonPath.parse(text)


def _location(where: str, key: str | int) -> str:
    return f"{where}[{key!r}]"


@dataclass(frozen=True, slots=True)
class ArgTemplate:
    """An undo's arguments: JSON whose strings may be references (see the module doc).

    ``tree`` is the parsed value: dicts, lists and literals as written, with a
    :class:`JsonPath` wherever a reference was (a ``$$`` literal already unescaped).
    """

    tree: Any

    @classmethod
    def parse(cls, value: Any) -> ArgTemplate:
        """Parse written arguments; ValueError naming the location (``['names'][0]``) of a bad path."""
        return cls(_parse(value, ""))

    def references(self) -> list[tuple[str, JsonPath]]:
        """Every reference with its location (``['names'][0]``; ``""`` for the whole value), in order."""
        found: list[tuple[str, JsonPath]] = []
        _collect(self.tree, "", found)
        return found

    @property
    def needs_result(self) -> bool:
        """Whether a reference reads the forward result (so the undo is not known before the call)."""
        return any(path.reads_result for _, path in self.references())

    @property
    def needs_args(self) -> bool:
        return any(not path.reads_result for _, path in self.references())

    def resolve(self, result: Any) -> Any:
        """The arguments read from ``result`` (``$args`` bound before); :class:`Unresolved` on a miss."""
        return _fill(self.tree, "", {RESULT: result, ARGS: _UNKNOWN})

    def bind_args(self, args: Mapping[str, Any] | None) -> ArgTemplate:
        """This template with its ``$args`` references read from ``args`` (:class:`Unresolved` as for resolve)."""
        return ArgTemplate(_fill(self.tree, "", {ARGS: _UNKNOWN if args is None else args}))

    def written(self) -> Any:
        """The template as JSON again: references as their text, literal ``$`` strings escaped."""
        return _written(self.tree)


def _parse(value: Any, where: str) -> Any:
    if isinstance(value, str):
        try:
            return _reference(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}" if where else str(err)) from None
    if isinstance(value, Mapping):
        return {key: _parse(item, _location(where, key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_parse(item, _location(where, at)) for at, item in enumerate(value)]
    return value


def _collect(tree: Any, where: str, found: list[tuple[str, JsonPath]]) -> None:
    if isinstance(tree, JsonPath):
        found.append((where, tree))
    elif isinstance(tree, Mapping):
        for key, item in tree.items():
            _collect(item, _location(where, key), found)
    elif isinstance(tree, list):
        for at, item in enumerate(tree):
            _collect(item, _location(where, at), found)


def _fill(tree: Any, where: str, sources: Mapping[str, Any]) -> Any:
    """``tree`` with the references whose root is in ``sources`` read; the others left as they are."""
    if isinstance(tree, JsonPath):
        if tree.root not in sources:
            return tree
        source = sources[tree.root]
        if source is _UNKNOWN:
            raise Unresolved(where, tree, "the call's arguments are not known here")
        try:
            return tree.find(source)
        except KeyError as err:
            raise Unresolved(where, tree, str(err.args[0]).removeprefix(f"{tree.text}: ")) from None
    if isinstance(tree, Mapping):
        return {key: _fill(item, _location(where, key), sources) for key, item in tree.items()}
    if isinstance(tree, list):
        return [_fill(item, _location(where, at), sources) for at, item in enumerate(tree)]
    return tree


def _written(tree: Any) -> Any:
    if isinstance(tree, JsonPath):
        return tree.text
    if isinstance(tree, str):
        return "$" + tree if tree.startswith("$") else tree
    if isinstance(tree, Mapping):
        return {key: _written(item) for key, item in tree.items()}
    if isinstance(tree, list):
        return [_written(item) for item in tree]
    return tree
