"""A local HTTP server speaking the subset of Stripe's API the connector uses, to the real SDK.

POST /v1/charges (form-encoded, Idempotency-Key honoured as Stripe does: a replay gets the
saved response), GET /v1/charges/<id>, GET /v1/charges/search (metadata['k']:'v'),
POST /v1/refunds (``charge_already_refunded`` once a charge is fully refunded). Bearer
auth against one key. Faults, set per test:

* ``lose_charges`` — the next N charges land, then the connection is dropped unanswered;
* ``kill_on_charge`` — a pid killed (SIGKILL) after the charge landed, before any answer;
* ``lying_refunds`` — refunds answer 200 and change nothing.

It counts refund *requests* apart from refunds *applied*, so a test can tell "the provider
deduplicated it" from "it was never sent twice".
"""

from __future__ import annotations

import os
import re
import signal
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from local_http import JsonHandler, LocalServer

__all__ = ["StripeServer"]

_SEARCH = re.compile(r"metadata\['([^']+)'\]:'([^']*)'\Z")


class StripeServer(LocalServer):
    def __init__(self, api_key: str = "sk_test_localserver0001") -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.charges: dict[str, dict[str, Any]] = {}
        self.idempotent: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        self.refund_requests: list[dict[str, Any]] = []
        self.refunds_applied: list[str] = []
        self.lose_charges = 0
        self.kill_on_charge: int | None = None
        self.lying_refunds = False
        super().__init__(self._handler())

    # -- the API ---------------------------------------------------------------------

    def _create_charge(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        metadata = {k[9:-1]: v for k, v in form.items() if k.startswith("metadata[")}
        cid = f"ch_{len(self.charges) + 1:04d}"
        charge = {
            "id": cid, "object": "charge", "amount": int(form["amount"]), "currency": form["currency"],
            "source": form.get("source"), "description": form.get("description"), "metadata": metadata,
            "status": "succeeded", "paid": True, "captured": True, "refunded": False, "amount_refunded": 0,
        }
        self.charges[cid] = charge
        return 200, dict(charge)

    def _refund(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.refund_requests.append(dict(form))
        charge = self.charges.get(form.get("charge", ""))
        if charge is None:
            return _error(404, "resource_missing", f"No such charge: '{form.get('charge')}'")
        if charge["refunded"]:
            return _error(400, "charge_already_refunded", f"Charge {charge['id']} has already been refunded.")
        refund = {"id": f"re_{len(self.refund_requests):04d}", "object": "refund", "amount": charge["amount"],
                  "charge": charge["id"], "status": "succeeded"}
        if not self.lying_refunds:
            charge["refunded"], charge["amount_refunded"] = True, charge["amount"]
            self.refunds_applied.append(charge["id"])
        return 200, refund

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):
            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self.reply(*_error(401, None, "Invalid API Key provided."))
                return False

            def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
                if not self._authorized():
                    return
                url = urlsplit(self.path)
                with server.lock:
                    if url.path == "/v1/charges/search":
                        query = parse_qs(url.query).get("query", [""])[0]
                        match = _SEARCH.match(query)
                        if match is None:
                            self.reply(*_error(400, "parameter_invalid", f"unsupported query {query!r}"))
                            return
                        hits = [dict(c) for c in server.charges.values()
                                if c["metadata"].get(match[1]) == match[2]]
                        self.reply(200, {"object": "search_result", "data": hits, "has_more": False,
                                         "url": "/v1/charges/search", "next_page": None})
                        return
                    found = re.fullmatch(r"/v1/charges/([\w]+)", url.path)
                    charge = server.charges.get(found[1]) if found else None
                    if charge is None:
                        self.reply(*_error(404, "resource_missing", f"No such charge: '{url.path}'"))
                    else:
                        self.reply(200, dict(charge))

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if not self._authorized():
                    return
                path = urlsplit(self.path).path
                key = self.headers.get("Idempotency-Key")
                drop = False
                with server.lock:
                    saved = server.idempotent.get((path, key)) if key else None
                    if saved is not None:
                        status, body = saved  # Stripe replays the first answer to a reused key
                    elif path == "/v1/charges":
                        status, body = server._create_charge(form)
                        if server.kill_on_charge is not None:
                            os.kill(server.kill_on_charge, signal.SIGKILL)
                            server.kill_on_charge = None
                            drop = True
                        elif server.lose_charges:
                            server.lose_charges -= 1
                            drop = True
                    elif path == "/v1/refunds":
                        status, body = server._refund(form)
                    else:
                        status, body = _error(404, None, f"unknown path {path}")
                    if key and saved is None:
                        server.idempotent[(path, key)] = (status, body)
                if drop:
                    self.close_connection = True  # the charge landed; its answer never leaves
                    return
                self.reply(status, body)

        return Handler


def _error(status: int, code: str | None, message: str) -> tuple[int, dict[str, Any]]:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if code:
        error["code"] = code
    return status, {"error": error}
