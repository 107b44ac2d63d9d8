"""Without the [fastapi] / [opentelemetry] extras, their names fail on use and say what to install.

This runs in the core environment, which has neither extra; the service environment
tests what they do when installed (packages/core/tests/service).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

import agent_saga


@pytest.mark.parametrize(("name", "module", "extra"), [
    ("saga_lifespan", "fastapi", "agent-saga[fastapi]"),
    ("setup_telemetry", "opentelemetry", "agent-saga[opentelemetry]"),
])
def test_a_name_whose_extra_is_missing_names_the_extra(name: str, module: str, extra: str) -> None:
    assert importlib.util.find_spec(module) is None, (
        f"{module} is installed in this environment; this test belongs to the core env, which has no "
        f"{extra} extra (run it with: python3 -m tox run -e core)"
    )
    stand_in = getattr(agent_saga, name)  # reading the name works: pydoc and hasattr read every name
    with pytest.raises(ImportError, match=re.escape(f"pip install '{extra}")):
        stand_in()  # using it says what to install
    assert name in dir(agent_saga)
    assert name not in agent_saga.__all__  # `from agent_saga import *` must work without the extra


def test_other_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'saga_lifespann'"):
        agent_saga.saga_lifespann  # noqa: B018


_MISSING = ("fastapi", "opentelemetry")


@pytest.mark.slow
@pytest.mark.parametrize("probe", [
    # help() pages through pydoc, which reads every name dir() lists
    "import agent_saga; help(agent_saga)",
    "import agent_saga; print(dir(agent_saga))",
    "import agent_saga; assert hasattr(agent_saga, 'saga_lifespan') and hasattr(agent_saga, 'setup_telemetry'); "
    "assert not hasattr(agent_saga, 'no_such_name')",
    "from agent_saga import saga_lifespan, setup_telemetry",
    "import agent_saga; help(agent_saga.saga_lifespan)",
])
def test_help_dir_and_hasattr_work_without_the_extras(probe: str) -> None:
    """In a fresh interpreter, as a user of a core-only install types them."""
    for module in _MISSING:
        assert importlib.util.find_spec(module) is None, f"{module} is installed here; this test belongs to the core env"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PAGER": "cat", "TERM": "dumb"}, check=False)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    if probe.endswith("help(agent_saga)"):
        assert "RecoveryDaemon" in out.stdout and "VERSION" in out.stdout  # the whole page, not one error


def test_a_missing_extra_is_reported_when_the_name_is_called() -> None:
    from agent_saga import saga_lifespan

    with pytest.raises(ImportError, match=re.escape("saga_lifespan needs FastAPI: pip install")):
        saga_lifespan("/tmp/x.wal")
