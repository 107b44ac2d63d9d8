from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_saga import configure_logging, setup_telemetry


@pytest.fixture
def provider() -> TracerProvider:
    return TracerProvider()


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """The spans of agent-saga's telemetry, recorded by the SDK's in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = setup_telemetry(provider)
    yield exporter
    telemetry.close()


class Lines:
    """The library's log lines, as configure_logging(json=True) wrote them."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def all(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def of(self, saga_id: str) -> list[dict[str, Any]]:
        return [line for line in self.all() if line["saga_id"] == saga_id]


@pytest.fixture
def log_lines() -> Iterator[Lines]:
    lines = Lines()
    setup = configure_logging(json=True, stream=lines.stream)
    yield lines
    setup.close()
