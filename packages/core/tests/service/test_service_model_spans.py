"""Model calls made steps by ``patch_all()`` are GenAI inference spans; a resumed run's served call says so.

The real openai client asks a local Chat Completions server (agent_saga.testing.ChatServer); the
spans are what the OpenTelemetry SDK's in-memory exporter recorded. The run is stopped where a crash
would be (``SagaQuarantined``: no end record, as in test_resume.py) and resumed in this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agent_saga
from agent_saga import durable
from agent_saga.testing import ChatServer, Reply, stop_run_if, stopped_then_resumed

KEY = "sk-test-T2sH7yUw4eB9nM1c"
STOP: dict[str, bool] = {}


@durable("spans.plan")
def plan(base_url: str) -> list[Any]:
    client = OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    first = client.chat.completions.create(model="planner", messages=[{"role": "user", "content": "where?"}])
    stop_run_if(STOP.get("after_first"))
    second = client.responses.create(model="writer", input="confirm")
    return [first.choices[0].message.content, second.output_text]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer({"planner": [Reply(text="oslo", prompt_tokens=21, completion_tokens=4)],
                     "writer": [Reply(text="booked", prompt_tokens=30, completion_tokens=2)]}) as running:
        yield running


@pytest.fixture(autouse=True)
def patched() -> Iterator[None]:
    agent_saga.patch_all({}, only=["openai"])
    yield
    agent_saga.unpatch_all()
    STOP.clear()


def _model_spans(spans: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
    return [(s.name, dict(s.attributes or {})) for s in spans.get_finished_spans() if s.name.startswith("chat ")]


def test_each_model_call_is_a_chat_span_with_the_genai_attributes_and_a_served_one_spends_nothing(
    spans: InMemorySpanExporter, server: ChatServer, tmp_path: Path,
) -> None:
    wal = tmp_path / "spans.wal"

    def one_live_call() -> None:
        ((name, live),) = _model_spans(spans)
        assert name == "chat planner"
        assert {k: v for k, v in live.items() if k.startswith("gen_ai.")} == {
            "gen_ai.system": "openai", "gen_ai.operation.name": "chat", "gen_ai.request.model": "planner",
            "gen_ai.response.model": "planner", "gen_ai.usage.input_tokens": 21, "gen_ai.usage.output_tokens": 4,
        }
        assert live["saga.semantics"] == "REVERSIBLE" and "saga.served" not in live
        spans.clear()

    value = stopped_then_resumed(plan, server.base_url, saga_id="p-1", wal=wal, stop=STOP, after_stop=one_live_call)
    assert value == ["oslo", "booked"]
    assert len(server.requests_for("planner")) == 1  # served, not asked again
    (_, served), (_, second) = _model_spans(spans)
    # The served call: the same request and response model, marked served, and no token counted again.
    assert served["saga.served"] is True and served["gen_ai.response.model"] == "planner"
    assert "gen_ai.usage.input_tokens" not in served and "gen_ai.usage.output_tokens" not in served
    # The Responses API names its usage input_tokens/output_tokens; the span says the same either way.
    assert (second["gen_ai.request.model"], second["gen_ai.usage.input_tokens"],
            second["gen_ai.usage.output_tokens"]) == ("writer", 30, 2)
    assert "saga.served" not in second
    everything = repr([dict(s.attributes or {}) for s in spans.get_finished_spans()])
    assert KEY not in everything
