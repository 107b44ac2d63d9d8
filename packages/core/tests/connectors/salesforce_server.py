"""A local HTTPS server speaking the subset of Salesforce's REST API the connector uses, to the
real `simple-salesforce` client (which only speaks https: the test trusts this server's own
self-signed certificate through REQUESTS_CA_BUNDLE).

GET .../sobjects/<type>/describe, GET .../sobjects/<type>/<id>?fields=a,b, PATCH
.../sobjects/<type>/<id> (honouring If-Unmodified-Since with 412, refusing a read-only field
with 400). Bearer session auth. LastModifiedDate has Salesforce's one-second resolution on a
clock that moves one second per write. Faults, set per test:

* ``flows`` — field values a "flow" forces right after every write (as a workflow rule,
  flow or trigger can, in the same transaction);
* ``lose_patches`` — the next N PATCHes are applied, then the connection dropped unanswered.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from local_http import JsonHandler, LocalServer

__all__ = ["SalesforceServer", "make_certificate"]

_STAMP = "%Y-%m-%dT%H:%M:%S.000+0000"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl, from Debian)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


class SalesforceServer(LocalServer):
    def __init__(self, cert: Path, key: Path, session_id: str = "00Dlocal!session.token.0001") -> None:
        self.session_id = session_id
        self.lock = threading.Lock()
        self.clock = datetime(2024, 1, 1, tzinfo=UTC)
        self.writable = {"Name": True, "StageName": True, "Amount": True, "Description": True,
                         "Score__c": False, "LastModifiedDate": False, "Id": False}
        self.records: dict[str, dict[str, Any]] = {}
        self.patches: list[dict[str, Any]] = []
        self.requests: list[str] = []  # every request's method and raw path, in order
        self.flows: dict[str, Any] = {}
        self.lose_patches = 0
        super().__init__(self._handler(), (cert, key))

    def write(self, record_id: str, fields: dict[str, Any]) -> None:
        """A write (by anyone): fields set, flows applied, LastModifiedDate moved on."""
        with self.lock:
            self._write(record_id, fields)

    def _write(self, record_id: str, fields: dict[str, Any]) -> None:
        self.clock += timedelta(seconds=1)
        record = self.records.setdefault(record_id, {"Id": record_id})
        record.update(fields)
        record.update(self.flows)
        record["LastModifiedDate"] = self.clock.strftime(_STAMP)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JsonHandler):
            def _route(self) -> tuple[str, str] | None:
                server.requests.append(f"{self.command} {self.path}")
                if self.headers.get("Authorization") != f"Bearer {server.session_id}":
                    self.reply(401, [{"errorCode": "INVALID_SESSION_ID", "message": "Session expired or invalid"}])
                    return None
                found = re.fullmatch(r"/services/data/v[\d.]+/sobjects/(\w+)/(\w+)/?", urlsplit(self.path).path)
                if found is None:
                    self.reply(404, [{"errorCode": "NOT_FOUND", "message": f"no route {self.path}"}])
                    return None
                return found[1], found[2]

            def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
                route = self._route()
                if route is None:
                    return
                sobject, name = route
                with server.lock:
                    if name == "describe":
                        fields = [{"name": f, "updateable": w} for f, w in server.writable.items()]
                        self.reply(200, {"name": sobject, "fields": fields})
                        return
                    record = server.records.get(name)
                    if record is None:
                        self.reply(404, [{"errorCode": "NOT_FOUND", "message": "The requested resource does not exist"}])
                        return
                    wanted = parse_qs(urlsplit(self.path).query).get("fields", [""])[0]
                    names = wanted.split(",") if wanted else list(record)
                    body = {"attributes": {"type": sobject}, **{f: record.get(f) for f in names}}
                    self.reply(200, body)

            def do_PATCH(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("Content-Length") or 0)
                data = json.loads(self.rfile.read(length) or b"{}")
                route = self._route()
                if route is None:
                    return
                _, record_id = route
                drop = False
                with server.lock:
                    server.patches.append(dict(data))
                    record = server.records.get(record_id)
                    since = self.headers.get("If-Unmodified-Since")
                    read_only = [f for f in data if not server.writable.get(f)]
                    if record is None:
                        status, body = 404, [{"errorCode": "NOT_FOUND", "message": "no such record"}]
                    elif read_only:
                        status, body = 400, [{"errorCode": "INVALID_FIELD_FOR_INSERT_UPDATE",
                                              "message": f"Unable to create/update fields: {', '.join(read_only)}"}]
                    elif since and datetime.strptime(record["LastModifiedDate"], "%Y-%m-%dT%H:%M:%S.%f%z") \
                            > parsedate_to_datetime(since):
                        status, body = 412, [{"errorCode": "PRECONDITION_FAILED",
                                              "message": "The requested resource has been modified"}]
                    else:
                        server._write(record_id, data)
                        status, body = 204, None
                        if server.lose_patches:
                            server.lose_patches -= 1
                            drop = True
                if drop:
                    self.close_connection = True
                    return
                self.reply(status, body)

        return Handler
