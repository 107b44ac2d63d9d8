"""One JSON-RPC message per line: how the proxy reads lines and writes its own.

The proxy splits its input on LF. The peer on the other side may not: the SDK's stdio
server (1.x and 2.x) reads through Python's text I/O with universal newlines, so a bare CR
ends a line there too, and other readers split on other characters still (``str.splitlines``
on U+0085, U+2028, U+2029, ...). So the proxy never forwards the bytes it received. It
forwards its own encoding of the value it parsed and judged, and that encoding is printable
ASCII: JSON escapes every control character inside strings, ``ensure_ascii`` every non-ASCII
one, and the compact separators leave no whitespace between tokens. No reader can find a
line end inside it, so the peer reads exactly the message the proxy judged.

A client line is refused (:class:`LineRefused`) unless it is exactly one value the proxy
can stand behind: strict UTF-8; no CR inside it (a server that ends lines at CR would read
several messages where the proxy reads one, and which reading the client meant cannot be
known); standard JSON (no ``NaN``/``Infinity``, no number too large for a float); no
duplicated key; no string that is not Unicode text (a lone surrogate escape); nested at most
:data:`MAX_DEPTH` deep (the SDK server's own JSON parser refuses
a message a level or two deeper).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_DEPTH", "LineRefused", "encode", "read_client_line", "read_server_line", "tool_calls_in"]

MAX_DEPTH = 200
_PARSE_ERROR, _INVALID_REQUEST = -32700, -32600
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class LineRefused(ValueError):
    """A client line the proxy will not forward; ``code`` is the JSON-RPC error to answer with.

    ``id`` is the request's id when the line still reads as one request (so the client's
    pending request fails at once rather than waiting), else None.
    """

    def __init__(self, code: int, message: str, id_: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id_


def encode(value: Any) -> bytes:
    """``value`` as one line (without its LF) that no line reader can split: printable ASCII."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def read_client_line(line: bytes) -> Any:
    """The one JSON value of a client line (its LF removed), or :class:`LineRefused`."""
    body = line.rstrip(b" \t\r")  # a CRLF client ends its lines with CR: harmless at the very end
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LineRefused(_PARSE_ERROR, f"not UTF-8: invalid byte at offset {err.start}") from None
    if "\r" in text:
        raise LineRefused(
            _PARSE_ERROR,
            "a carriage return inside the line: a stdio server that ends lines at CR would read "
            "more than one message in it; send one JSON message per line, ended by LF or CRLF",
            _request_id(_lenient(text)),
        )
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                           parse_float=_finite)
    except _DuplicateKey as dup:
        raise LineRefused(_INVALID_REQUEST, f"duplicate key {dup.args[0]!r} in message") from None
    except (ValueError, RecursionError) as err:
        raise LineRefused(_PARSE_ERROR, f"not JSON: {str(err)[:200]}") from None
    if not _shallow(body, value):
        raise LineRefused(_INVALID_REQUEST, f"nested more than {MAX_DEPTH} levels deep", _request_id(value))
    if _SURROGATE_ESCAPE.search(body):
        try:  # only an escape can carry a surrogate: a proper pair is one character, a lone one none
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise LineRefused(_PARSE_ERROR, "a string holds a lone UTF-16 surrogate escape, which is not "
                                            "text; send valid Unicode", _request_id(value)) from None
    return value


def read_server_line(line: bytes) -> Any:
    """The JSON value of a server line; ValueError if it is not UTF-8 JSON the proxy can re-encode."""
    value = json.loads(line.decode("utf-8"))
    if not _shallow(line, value):
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return value


def tool_calls_in(line: bytes) -> list[dict[str, Any]]:
    """Every ``tools/call`` message some reader could find in a (refused) line, for the log.

    The proxy's reading (the whole line) and the SDK server's (invalid bytes replaced,
    lines ended at CR and at LF), each keeping the last and the first of duplicated keys.
    """
    text = line.decode("utf-8", errors="replace")
    found: dict[str, dict[str, Any]] = {}
    for piece in [text, *io.StringIO(text, newline=None)]:
        for hook in (None, _first_wins):
            for message in _messages(_lenient(piece, hook)):
                if message.get("method") == "tools/call":
                    found.setdefault(json.dumps(message, sort_keys=True, default=str), message)
    return list(found.values())


def _lenient(text: str, hook: Any = None) -> Any:
    try:
        return json.loads(text, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return None


def _messages(value: Any) -> Iterator[dict[str, Any]]:
    for message in value if isinstance(value, list) else [value]:
        if isinstance(message, dict):
            yield message


def _request_id(value: Any) -> Any:
    id_ = value.get("id") if isinstance(value, dict) else None
    return id_ if isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool)) else None


def _shallow(raw: bytes, value: Any) -> bool:
    """Whether ``value`` nests at most MAX_DEPTH deep (walked only when ``raw`` has that many brackets)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:  # iterative: the point is not to recurse
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} does not fit a float")
    return value
