"""What an app's start-up module does for the SQLAlchemy connector, in the worker and the daemon:
register the connector (import) and say how to resolve the credential "app_db" (a SQLAlchemy URL)."""

from __future__ import annotations

import os

import agent_saga.connectors.sqlalchemy  # noqa: F401 - registers the undos and the reconcilers
from agent_saga.connectors import set_credential_resolver

set_credential_resolver(lambda name: {"app_db": os.environ["AGENT_SAGA_TEST_SA_URL"]}[name])
