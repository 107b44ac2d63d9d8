"""A worker process: one saga that updates and inserts rows through the SQLAlchemy connector, then waits.

usage: python sqlalchemy_worker.py WAL TABLE. It prints "thinking" once both steps have
returned (the insert's commit record may not be durable yet: recovery undoes it either way,
committed or in flight), then waits (as for the model) until the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time

import sqlalchemy_config  # noqa: F401

from agent_saga import FileWAL, saga_scope
from agent_saga.connectors.sqlalchemy import insert, update

table = sys.argv[2]
with FileWAL(sys.argv[1]) as wal, saga_scope(wal, name="crm-edit"):
    update(table, {"org": 1, "id": 7}, {"price": "50.00", "note": "worker"}, credential_ref="app_db")
    insert(table, {"org": 1, "id": 9, "name": "worker's"}, credential_ref="app_db")
    print("thinking", flush=True)
    time.sleep(600)  # killed here: no saga end, no rollback, only the log
