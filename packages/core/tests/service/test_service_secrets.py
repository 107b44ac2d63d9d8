"""A secret echoed in a tool's exception reaches no span (issue 25, item 8).

The key is resolved through a credential reference, so this process knows it: the
step span's status, its exception event (message and stack trace) and the saga span's
status are scrubbed. A URL's password in the error text is redacted too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Lines
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_saga import MemoryWAL, SagaAborted, saga_scope
from agent_saga.connectors import resolve_credential, set_credential_resolver

KEY = "sk_live_SPANk3y000111222"
URL_PASSWORD = "span-url-PASSWORD-77"


def _everything(exporter: InMemorySpanExporter) -> str:
    """Every attribute, event attribute and status text of every finished span, as one text."""
    parts: list[Any] = []
    for span in exporter.get_finished_spans():
        parts += [span.name, dict(span.attributes or {}), span.status.description]
        parts += [(event.name, dict(event.attributes or {})) for event in span.events]
    return json.dumps(parts, default=str)


def test_a_resolved_key_and_a_url_password_in_the_tools_exception_reach_no_span(
    spans: InMemorySpanExporter, log_lines: Lines
) -> None:
    set_credential_resolver(lambda name: KEY)

    def call() -> None:
        used = resolve_credential("stripe_prod")
        raise PermissionError(f"invalid key {used} for https://svc:{URL_PASSWORD}@api.example/v1")

    try:
        with pytest.raises(SagaAborted) as aborted:
            with saga_scope(MemoryWAL()) as s:
                s.execute(tool="charges.create", semantics="IRREVERSIBLE", forward=call, args={"amount": 5})
    finally:
        set_credential_resolver(None)
    text = _everything(spans)
    assert "invalid key" in text and "exception" in text  # the failure is there, only scrubbed
    for secret in (KEY, URL_PASSWORD):
        assert secret not in text
        assert secret not in str(aborted.value)
        assert secret not in json.dumps(log_lines.all())
