"""Without the [fastapi] / [opentelemetry] extras, their names fail on use and say what to install.

This runs in the core environment, which has neither extra; the service environment
tests what they do when installed (packages/core/tests/service).
"""

from __future__ import annotations

import importlib.util
import re

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
    with pytest.raises(ImportError, match=re.escape(f"pip install '{extra}'")):
        getattr(agent_saga, name)
    assert name in dir(agent_saga)
    assert name not in agent_saga.__all__  # `from agent_saga import *` must work without the extra


def test_other_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'saga_lifespann'"):
        agent_saga.saga_lifespann  # noqa: B018
