"""Recorded kwargs are data: each shipped connector's undo refuses a hostile one before contacting anything.

The recovery daemon runs these handlers with kwargs the agent wrote. What to undo (a charge,
a row, a record) comes from there; how to reach it (the API base, the connection string,
the instance) comes from the daemon's own configuration, and the credential is named, never
given. Each test hands a handler what a hostile agent could record and checks both that it
is refused (``CompensationRefused``: the daemon escalates it at once) and that the
configured service, or the place the record points at, heard nothing.
"""

from __future__ import annotations

import inspect
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stripe_server import StripeServer

import agent_saga.connectors.postgres as postgres
import agent_saga.connectors.salesforce as salesforce
import agent_saga.connectors.sqlalchemy as sqlalchemy_connector
import agent_saga.connectors.stripe as stripe_connector
from agent_saga import CompensationRefused
from agent_saga.connectors import set_credential_resolver

# Names of parameters that would say *how* to reach something, not *what* to undo.
HOW = ("url", "uri", "endpoint", "base", "host", "dsn", "command", "cmd", "shell", "exec", "module", "path",
       "webhook", "server")


class Listener:
    """A TCP port on 127.0.0.1 that counts the connections made to it (and drops them)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Iterator[Path]:
    """A resolver of the common shape (Docker's /run/secrets): the credential named N is the file secrets/N.

    Beside it lies a file the agent must not reach: the name decides which file is read.
    """
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    set_credential_resolver(lambda name: (secrets / name).read_text().strip())
    yield secrets
    set_credential_resolver(None)


def outside(secrets: Path, name: str, text: str) -> Path:
    """``text`` written to ``name`` beside the secrets directory, where no credential's name leads: its path."""
    path = secrets.parent / name
    path.parent.mkdir()
    path.write_text(text)
    return path


def test_no_shipped_connector_undo_takes_a_way_to_reach_something() -> None:
    handlers = [stripe_connector.refund, postgres.revert_update, postgres.remove_inserted, postgres.restore_deleted,
                salesforce.revert, sqlalchemy_connector.revert_update, sqlalchemy_connector.remove_inserted,
                sqlalchemy_connector.restore_deleted]
    for fn in handlers:
        for name in inspect.signature(fn).parameters:
            assert not any(word in name.lower() for word in HOW), f"{fn.__qualname__} takes {name!r}"


def test_stripe_refund_refuses_a_credential_outside_its_resolvers_names(
    stripe_server: StripeServer, secrets_dir: Path
) -> None:
    (secrets_dir / "stripe_test").write_text(stripe_server.api_key)
    live_key = outside(secrets_dir, "other/live_key", stripe_server.api_key)  # another account's key, say
    stripe_server.charges["ch_1"] = {"id": "ch_1", "object": "charge", "amount": 5, "currency": "usd",
                                    "status": "succeeded", "refunded": False, "amount_refunded": 0, "metadata": {}}
    for ref in ("../other/live_key", str(live_key), "http://127.0.0.1:1/key"):
        with pytest.raises(CompensationRefused, match="not a credential's name"):
            stripe_connector.refund("ch_1", credential_ref=ref, idempotency_key="k1")
    assert stripe_server.refund_requests == []  # nothing went out, with any key
    stripe_connector.refund("ch_1", credential_ref="stripe_test", idempotency_key="k1")  # the name it may use
    assert len(stripe_server.refund_requests) == 1


@pytest.mark.parametrize("handler", ["revert_update", "remove_inserted", "restore_deleted"])
def test_postgres_undos_refuse_a_connection_string_the_record_points_at(
    listener: Listener, secrets_dir: Path, handler: str
) -> None:
    outside(secrets_dir, "elsewhere/dsn", f"postgresql://agent@127.0.0.1:{listener.port}/x?connect_timeout=3")
    kwargs: dict[str, Any] = {"table": "accounts", "key": {"id": 1}}
    kwargs |= {"revert_update": {"before": {"n": "1"}, "wrote": {"n": 2}},
               "remove_inserted": {"row": {"id": 1, "n": 2}},
               "restore_deleted": {"before": {"id": "1", "n": "1"}}}[handler]
    for ref in ("../elsewhere/dsn", f"postgresql://agent@127.0.0.1:{listener.port}/x"):
        with pytest.raises(CompensationRefused, match="not a credential's name"):
            getattr(postgres, handler)(**kwargs, credential_ref=ref)
    assert listener.accepted == 0  # no connection was attempted


@pytest.mark.parametrize("handler", ["revert_update", "remove_inserted", "restore_deleted"])
def test_sqlalchemy_undos_refuse_a_database_url_the_record_points_at(
    listener: Listener, secrets_dir: Path, handler: str
) -> None:
    outside(secrets_dir, "elsewhere/url", f"postgresql+psycopg://agent@127.0.0.1:{listener.port}/x?connect_timeout=3")
    planted = secrets_dir.parent / "planted.db"  # a SQLite URL creates its file on first connection
    kwargs: dict[str, Any] = {"table": "accounts", "key": {"id": 1}}
    kwargs |= {"revert_update": {"before": {"n": 1}, "wrote": {"n": 2}},
               "remove_inserted": {"row": {"id": 1, "n": 2}},
               "restore_deleted": {"before": {"id": 1, "n": 1}}}[handler]
    for ref in ("../elsewhere/url", f"postgresql+psycopg://agent@127.0.0.1:{listener.port}/x", f"sqlite:///{planted}"):
        with pytest.raises(CompensationRefused, match="not a credential's name"):
            getattr(sqlalchemy_connector, handler)(**kwargs, credential_ref=ref)
    assert listener.accepted == 0 and not planted.exists()  # no connection was attempted


@pytest.mark.parametrize(("sobject", "record_id"), [
    ("Opportunity", "006000000000001/../../../../../apexrest/Steal"),
    ("Opportunity", "006000000000001?fields=Secret"),
    ("Opportunity/../../../../apexrest", "006000000000001"),
    ("session", "006000000000001"),
])
def test_salesforce_revert_refuses_a_record_that_is_not_one_record(
    salesforce_server: Any, sobject: str, record_id: str
) -> None:
    salesforce_server.write("006000000000001", {"Name": "after"})
    with pytest.raises(CompensationRefused, match=r"nothing was sent|not an sObject"):
        salesforce.revert(sobject, record_id, before={"Name": "before"}, wrote={"Name": "after"},
                          credential_ref="sf_test")
    assert salesforce_server.requests == []  # not even the describe
    assert salesforce_server.records["006000000000001"]["Name"] == "after"
