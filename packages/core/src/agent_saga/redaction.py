"""Arguments whose names say "secret" never reach a record or a notification in clear.

A tool's arguments are written to the log (fsync'd, kept as evidence, read by other
processes) and shown to approvers. An ``api_key`` or ``password`` argument has no
business in either, so by default its value is replaced by :data:`REDACTED`; a tool
policy that really needs the value logged names it in ``reveal``.

Names are split into words (``_``, ``-``, ``.``, camelCase) and matched word by word,
so ``max_tokens`` or ``tokenizer`` stay visible while ``auth_token``, ``apiKey`` and
``X-Api-Key`` do not. A name ending in ``ref`` is a *reference* to a credential
(``credential_ref``), resolved at use time, and is never a secret itself.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from functools import lru_cache
from itertools import pairwise
from typing import Any

__all__ = ["REDACTED", "looks_secret", "redact_args"]

#: What a secret-looking argument's value is replaced by: marked, so a reader (or the UI)
#: can tell a redaction from a value.
REDACTED = "<redacted: secret>"

_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SECRET_WORDS = frozenset({
    "password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "authorization",
    "credential", "credentials", "cookie", "jwt", "bearer", "signature", "privatekey",
})
_SECRET_PAIRS = frozenset({
    ("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"), ("client", "secret"),
    ("session", "id"), ("auth", "code"), ("refresh", "token"), ("signing", "key"),
})


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

    Nested mappings are redacted by the same rule (a ``headers`` dict with an
    ``Authorization`` entry). Names in ``reveal`` are kept as they are.
    """
    out: dict[str, Any] = {}
    for name, value in args.items():
        if name in reveal:
            out[name] = value
        elif looks_secret(str(name)):
            out[name] = REDACTED
        elif isinstance(value, Mapping):
            out[name] = redact_args(value, reveal)
        else:
            out[name] = value
    return out
