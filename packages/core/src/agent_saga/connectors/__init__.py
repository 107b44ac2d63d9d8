"""Reference connectors: each registers its compensator *and* its reconciler on import.

* ``agent_saga.connectors.stripe`` — a charge, its refund (``pip install 'agent-saga[stripe]>=3.0.0'``)
* ``agent_saga.connectors.postgres`` — update / insert / delete by (compound) primary key,
  each undone from a snapshot of the touched columns (``pip install 'agent-saga[postgres]>=3.0.0'``)
* ``agent_saga.connectors.salesforce`` — a record update, reverted field by field
  (``pip install 'agent-saga[salesforce]>=3.0.0'``)
* ``agent_saga.connectors.sqlalchemy`` — the postgres connector's three steps on any database
  SQLAlchemy 2.x speaks, guarded by a hash of the row (``pip install 'agent-saga[sqlalchemy]>=3.0.0'``)

Each is imported on its own, lazily: importing one never needs another's client
library. Credentials travel as names (``credential_ref="stripe_prod"``), logged as
such, and are resolved at the moment of use by the resolver this process was given::

    from agent_saga.connectors import set_credential_resolver
    set_credential_resolver(lambda ref: vault.read(f"agents/{ref}"))

Give the recovery daemon and ``agent-saga reconcile`` the same imports and resolver
as the agent (``--import agent_saga.connectors.stripe --import myapp.secrets``).
See docs/CONNECTORS.md for how to write one.
"""

from typing import Any

from agent_saga.credentials import assert_no_secrets, credential_ref, set_credential_resolver

__all__ = ["assert_no_secrets", "credential_ref", "resolve_credential", "set_credential_resolver"]


def resolve_credential(name: str) -> Any:
    """The credential called ``name``, from this process's resolver, now (for a connector's own calls).

    Never log or return it: keep the *name* in arguments and results, as the shipped
    connectors do with ``credential_ref``.
    """
    from agent_saga.connectors._common import secret

    return secret(name)[0]
