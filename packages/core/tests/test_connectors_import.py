"""The connectors package needs no extra; each connector names its extra when its client library is missing.

This runs in the core env, where none of stripe, psycopg, simple-salesforce or SQLAlchemy is installed.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest


def test_the_seed_import_works_without_any_extra() -> None:
    from agent_saga.connectors import credential_ref, set_credential_resolver  # the seed's line

    assert callable(set_credential_resolver) and credential_ref("stripe_prod") == {"$credential_ref": "stripe_prod"}


@pytest.mark.parametrize(("connector", "library", "extra"), [
    ("stripe", "stripe", "stripe"), ("postgres", "psycopg", "postgres"), ("salesforce", "simple_salesforce", "salesforce"),
    ("sqlalchemy", "sqlalchemy", "sqlalchemy"),
])
def test_a_connector_without_its_library_names_the_extra(connector: str, library: str, extra: str) -> None:
    assert importlib.util.find_spec(library) is None, f"{library} is installed in this env; this test needs it absent"
    with pytest.raises(ImportError, match=rf"pip install 'agent-saga\[{extra}\]>=3\.0\.0'"):
        importlib.import_module(f"agent_saga.connectors.{connector}")
