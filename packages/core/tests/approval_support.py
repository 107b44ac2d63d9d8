"""Shared helpers for the approval tests: the gateway, a real local webhook server, waiting, the agent script."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_saga import ApprovalGateway, ApprovalPolicy, EscalationLevel, WebhookNotifier
from agent_saga.approvals import Notifier

AGENT = Path(__file__).with_name("approval_agent.py")


def policy(timeout: float = 60.0, *levels: EscalationLevel, poll_interval: float = 0.02) -> ApprovalPolicy:
    """``timeout`` to decide, asking ``levels`` (by default @oncall alone), the store polled often: the people answer fast."""
    return ApprovalPolicy(timeout=timeout, levels=levels or (EscalationLevel(targets=("@oncall",)),),
                          poll_interval=poll_interval)


def gateway(store: Any, notifier: Notifier | str, wal: Any, pol: ApprovalPolicy | None = None) -> ApprovalGateway:
    """An ApprovalGateway over ``store`` and ``wal`` telling ``notifier`` (a URL: a webhook POSTed to there)."""
    told = WebhookNotifier(notifier) if isinstance(notifier, str) else notifier
    return ApprovalGateway(store=store, notifier=told, wal=wal, policy=pol or policy())


@contextmanager
def approval_store(kind: str, tmp_path: Path) -> Iterator[Any]:
    """A file store under ``tmp_path``, or a Redis store under a prefix of its own (removed after)."""
    from gate_support import redis_url

    from agent_saga.approvals import FileApprovalStore, RedisApprovalStore

    if kind == "file":
        yield FileApprovalStore(tmp_path / "approvals")
        return
    store = RedisApprovalStore(redis_url(), prefix=f"agent-saga:test:{uuid.uuid4().hex}")
    try:
        yield store
    finally:
        keys = list(store.client.scan_iter(f"{store.prefix}:*"))
        if keys:
            store.client.delete(*keys)
        store.client.close()


def trusted_key(name: str = "risk@corp") -> Any:
    """A fresh approver key, trusted on this test's host (conftest moves the host under tmp_path)."""
    from agent_saga.approvals import SigningKey, trust_key

    key = SigningKey.generate(name)
    trust_key(key.public)
    return key


class Hook:
    """An HTTP server on 127.0.0.1 that records every POSTed JSON body and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                with hook._lock:
                    hook.bodies.append(body)
                self.send_response(hook.status)
                self.end_headers()
                self.wfile.write(b"ok" if hook.status < 300 else b"broken")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/T000/B000/secret"
        # serve_forever's default 0.5 s poll is how long shutdown() waits: the tests close many hooks.
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.bodies)

    def requests(self) -> list[str]:
        """The request id of every notification, in order."""
        with self._lock:
            return [b["agent_saga"]["request"] for b in self.bodies]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until ``condition()`` is truthy; fail naming ``what`` (a bound on a hang, not a timing claim)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def of_type(records: list[dict[str, Any]], rtype: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == rtype]


def bodies(wal: Any, rtype: str) -> list[dict[str, Any]]:
    """The bodies of ``wal``'s records of type ``rtype``, in log order."""
    return [r["body"] for r in of_type(list(wal.records()), rtype)]
