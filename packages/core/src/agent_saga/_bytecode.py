"""Which interpreters' bytecode the library reads its caller's frame on.

Two places look at the caller's next instruction: ``toolspec.awaited_by_caller`` (is the call
of a sync tool awaited?) and ``_migrating`` (is a 2.x name being imported with ``from``?). Both
trust the look-up only where it was proven, and fail safe elsewhere; this bottom-layer module
is where that list lives, so neither imports the other.
"""

from __future__ import annotations

import sys

__all__ = ["BYTECODE_KNOWN", "PROVEN_BYTECODE"]

#: The CPython versions whose bytecode the look-ups were proven on: 3.11 in CI; 3.12 and 3.13
#: by their ``dis`` docs (and a run by hand), never in CI here.
PROVEN_BYTECODE = frozenset({(3, 11), (3, 12), (3, 13)})
#: This interpreter is one of them.
BYTECODE_KNOWN = sys.implementation.name == "cpython" and sys.version_info[:2] in PROVEN_BYTECODE
