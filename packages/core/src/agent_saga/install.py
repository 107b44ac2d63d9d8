"""Install hints that can only install this project: ``pip install 'agent-saga[encryption]>=3.0.0'``.

``agent-saga`` on the package index is an unrelated project (0.x-2.x, the same import
name), and this project's distributions are not published there yet: an unpinned
``pip install 'agent-saga[encryption]'`` in a fresh venv resolves to that 2.x line.
Every hint an error message, a docstring or a doc prints is built here (or, in docs,
installs from the checkout), pinned to the 3.x line so it can never take the other
one; ``tests/test_install_hints.py`` scans for any that is not.

Extras are spelled normalized (PEP 685: lower case, runs of ``-_.`` as one ``-``):
the pip that ``python3 -m venv`` brings on Python 3.11 (23.2.1) compares an extra's
name as typed against the metadata's normalized name, so ``[openai_agents]``
installed nothing there.
"""

from __future__ import annotations

import re

__all__ = ["FLOOR", "normalize_extra", "pip_install"]

#: The lowest version of the 3.x line: every hint pins ``>=FLOOR``.
FLOOR = "3.0.0"


def normalize_extra(name: str) -> str:
    """An extra's name as the metadata spells it (``openai_agents`` -> ``openai-agents``)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def pip_install(distribution: str, *extras: str) -> str:
    """The command that installs ``distribution`` (with ``extras``) from the 3.x line, and no other."""
    wanted = ",".join(normalize_extra(extra) for extra in extras if extra)
    return f"pip install '{distribution}{f'[{wanted}]' if wanted else ''}>={FLOOR}'"
