"""The moved-framework check every adapter's tests run: a fresh interpreter where the framework changed.

An adapter's ``_compat`` probes, at import, what it takes from its framework beyond the
documented API. Each adapter's tests pin the error an install whose framework moved gets:
the supported range, what moved, the install command. The change runs in a subprocess, so
the framework the other tests use stays as it is.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agent_saga.install import FLOOR

__all__ = ["assert_moved_fails_at_import"]

#: Given to every change: what a refactor that renames attributes a constructor sets looks like.
_RENAME_ON_INIT = '''
def rename_on_init(cls, *names):
    """After ``cls.__init__``, each of ``names`` is gone from the instance (kept under another name)."""
    original = cls.__init__

    def renamed(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for name in names:
            setattr(self, f"_moved{name}", self.__dict__.pop(name))

    cls.__init__ = renamed
'''


def assert_moved_fails_at_import(module: str, change: str, supports: str, *holds: str) -> str:
    """Run ``change`` (source: what a refactor of the framework could do), then import ``module``.

    ``change`` may call ``rename_on_init(cls, *attribute_names)``. The import must fail with a
    message that starts ``<distribution> supports <supports>``, holds each of ``holds`` and ends
    with the command that installs the distribution with its framework's extra. Returns the message.
    """
    distribution = module.replace("_", "-")
    install = f"pip install '{distribution}[{distribution.removeprefix('agent-saga-')}]>={FLOOR}'"
    attempt = (f"{_RENAME_ON_INIT}\n{textwrap.dedent(change)}\n"
               f"try:\n    import {module}\nexcept ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", attempt], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"{distribution} supports {supports}"), out
    for fragment in holds:
        assert fragment in out, (fragment, out)
    assert out.rstrip().endswith(install), (install, out)
    return out
