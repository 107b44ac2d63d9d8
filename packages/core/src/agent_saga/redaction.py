"""Secrets never reach a record, a notification, a span or a log line in clear.

A tool's arguments are written to the log (fsync'd, kept as evidence, read by other
processes) and shown to approvers. An ``api_key`` or ``password`` argument has no
business in either, so by default its value is replaced by :data:`REDACTED`; a tool
policy that really needs the value logged names it in ``reveal``.

What is caught (docs/CONCEPTS.md, "What redaction catches"):

* a value under a secret-looking *name*, at any depth: in a dict, in a list or tuple
  of dicts, nested. Names are split into words (``_``, ``-``, ``.``, camelCase) and
  matched word by word, so ``max_tokens`` or ``tokenizer`` stay visible while
  ``auth_token``, ``apiKey``, ``X-Api-Key`` and ``db_pass`` do not. A name ending in
  ``ref`` is a *reference* to a credential (``credential_ref``), resolved at use time,
  and is never a secret itself;
* the password of a URL's userinfo (``scheme://user:PASSWORD@host``), in any string;
* a value this process learnt is secret: resolved through a credential reference, or
  redacted by name above. It is remembered (:func:`remember_secret`) and
  :func:`scrub_text` replaces it wherever it turns up later -- say, echoed in a tool's
  exception text -- in the records, the exceptions the library raises, spans and log lines.

What is not: a secret transformed (base64, split, hashed, URL-encoded), a secret under
an innocent name that was never resolved through a reference nor passed under a
secret-looking name, the user part of a URL's userinfo, and values shorter than
:data:`MIN_SECRET` characters (they would scrub ordinary words).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Mapping
from functools import lru_cache
from itertools import pairwise
from typing import Any

__all__ = [
    "MIN_SECRET", "REDACTED", "SCRUBBED", "looks_secret", "redact_args", "redact_url_passwords", "redact_value",
    "remember_secret", "scrub_text",
]

#: What a secret-looking argument's value is replaced by: marked, so a reader (or the UI)
#: can tell a redaction from a value.
REDACTED = "<redacted: secret>"
#: What a remembered secret is replaced by in text (see :func:`scrub_text`).
SCRUBBED = "<redacted: credential>"
#: Remembered secrets shorter than this are not scrubbed from text: they would scrub words.
MIN_SECRET = 6

_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SECRET_WORDS = frozenset({
    "password", "passwd", "passphrase", "pass", "pwd", "secret", "token", "apikey", "authorization",
    "credential", "credentials", "cookie", "jwt", "bearer", "signature", "privatekey", "accesskey",
    "secretkey", "clientsecret", "accesstoken", "authtoken", "refreshtoken", "sessionid",
})
_SECRET_PAIRS = frozenset({
    ("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"), ("client", "secret"),
    ("session", "id"), ("auth", "code"), ("refresh", "token"), ("signing", "key"),
})
# scheme://user:password@host -- the password runs to the last '@' before the path (a raw
# '@' in a password is common), and stops at whitespace, a quote or the end of the authority.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'\"<>]*:)([^\s/?#'\"<>]*)@")


@lru_cache(maxsize=4096)
def looks_secret(name: str) -> bool:
    """Whether an argument called ``name`` probably holds a secret."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words or words[-1] in ("ref", "reference"):
        return False
    if any(w in _SECRET_WORDS for w in words) or words == ["auth"]:
        return True
    return any(pair in _SECRET_PAIRS for pair in pairwise(words))


def redact_args(args: Mapping[str, Any], reveal: Collection[str] = ()) -> dict[str, Any]:
    """``args`` with every secret-looking value replaced by :data:`REDACTED`.

    Every container is walked (a ``headers`` dict with an ``Authorization`` entry, a
    list of dicts each with a ``password``), and a URL's password is redacted in any
    string. Names in ``reveal`` are kept as they are, at any depth. The values
    redacted are remembered (:func:`remember_secret`), so an exception echoing one
    later is scrubbed too.
    """
    out: dict[str, Any] = {}
    for name, value in args.items():
        if name in reveal:
            out[name] = value
        elif (type(value) is str and "://" not in value) or type(value) in _INERT:
            # The usual flat values, without the walk's calls.
            if isinstance(name, str) and looks_secret(name):
                remember_secret(value)
                out[name] = REDACTED
            else:
                out[name] = value
        else:
            out[name] = _redact(name, value, 0, reveal)
    return out


def redact_value(value: Any, reveal: Collection[str] = ()) -> Any:
    """``value`` (any nesting of dicts, lists and strings) redacted as :func:`redact_args` redacts
    an argument's value: what a step's result goes through before the log records it."""
    return _redact_value(value, 0, reveal)


_INERT = frozenset({int, float, bool, type(None)})
_MAX_DEPTH = 200


def _redact(name: Any, value: Any, depth: int, reveal: Collection[str]) -> Any:
    if name in reveal:
        return value
    if isinstance(name, str) and looks_secret(name):
        _remember_all(value, depth)
        return REDACTED
    return _redact_value(value, depth, reveal)


def _redact_value(value: Any, depth: int, reveal: Collection[str]) -> Any:
    if depth > _MAX_DEPTH:
        return value  # the log refuses it at the door; nothing here to walk safely
    if isinstance(value, str):
        return redact_url_passwords(value)
    if isinstance(value, Mapping):
        return {k: _redact(k, v, depth + 1, reveal) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_value(v, depth + 1, reveal) for v in value]
    return value


def _remember_all(value: Any, depth: int) -> None:
    if isinstance(value, (str, bytes)):
        remember_secret(value)
    elif depth <= _MAX_DEPTH and isinstance(value, Mapping):
        for item in value.values():
            _remember_all(item, depth + 1)
    elif depth <= _MAX_DEPTH and isinstance(value, (list, tuple)):
        for item in value:
            _remember_all(item, depth + 1)


def redact_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` replaced by :data:`REDACTED`."""
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(_hide_password, text)


def _hide_password(match: re.Match[str]) -> str:
    password = match.group(2)
    remember_secret(password)
    return f"{match.group(1)}{REDACTED}@" if password else match.group(0)


# -- secrets this process knows: scrubbed from any text that leaves it -------------------

_lock = threading.Lock()
_known: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first
_KNOWN_MAX = 512
_pattern: re.Pattern[str] | None = None


def remember_secret(value: Any) -> None:
    """Scrub ``value`` (a str or bytes secret) from every text :func:`scrub_text` sees from now on.

    Called for each value a credential reference resolves to and each value redacted
    by name; at most the newest 512 are kept.
    """
    global _pattern
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return
    if not isinstance(value, str) or len(value) < MIN_SECRET or value in _known:
        return
    with _lock:
        _known[value] = None
        if len(_known) > _KNOWN_MAX:
            del _known[next(iter(_known))]
        # Longest first: a secret that contains another is replaced whole.
        _pattern = re.compile("|".join(re.escape(k) for k in sorted(_known, key=len, reverse=True)))


def scrub_text(text: str) -> str:
    """``text`` with every remembered secret and every URL password replaced.

    The one function every place that lets text leave the process calls: error text
    becoming a record, the exceptions the library raises, span attributes, log lines.
    """
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(SCRUBBED, text)
    return redact_url_passwords(text)
