"""setup_telemetry(): spans for sagas, steps and rollbacks, recorded by the SDK's in-memory exporter."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import Lines
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_saga import (
    MemoryWAL,
    SagaAborted,
    call_with,
    compensator,
    saga_scope,
    tool,
)

undone: list[str] = []


@compensator("telemetry-test.cancel")
def cancel(order: str) -> None:
    undone.append(order)


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    found = {span.name: span for span in exporter.get_finished_spans()}
    assert len(found) == len(exporter.get_finished_spans()), "span names are not unique in this test"
    return found


def fail() -> None:
    raise TimeoutError("the carrier did not answer")


async def two_steps_failing_at_the_second() -> str:
    async with saga_scope(MemoryWAL(), name="ship-order") as s:
        await s.execute(tool="orders.create", semantics="COMPENSABLE", forward=lambda: {"id": "o-1"},
                        compensate=call_with(cancel, order="o-1"))
        # known before the call, so the UNKNOWN second step is undone too: the rollback is clean
        await s.execute(tool="shipping.book", semantics="COMPENSABLE", forward=fail,
                        compensate=call_with(cancel, order="shipment-of-o-1"))
    raise AssertionError("unreachable")


async def test_a_saga_failing_at_step_2_is_a_rolled_back_root_with_step_and_rollback_children(
    spans: InMemorySpanExporter, log_lines: Lines
) -> None:
    with pytest.raises(SagaAborted) as aborted:
        await two_steps_failing_at_the_second()
    saga_id = aborted.value.report.saga_id
    found = by_name(spans)
    assert set(found) == {
        "saga.execute", "saga.step.orders.create", "saga.step.shipping.book",
        "saga.rollback.shipping.book", "saga.rollback.orders.create",
    }
    root = found["saga.execute"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["saga.status"] == "ROLLED_BACK"
    assert root.attributes["saga.id"] == saga_id
    assert root.attributes["saga.rollback.clean"] is True
    assert root.status.status_code is StatusCode.ERROR  # the saga did not do what it set out to
    for name, span in found.items():
        if span is not root:
            assert span.parent is not None and span.parent.span_id == root.context.span_id, name
            assert span.context.trace_id == root.context.trace_id

    first, second = found["saga.step.orders.create"], found["saga.step.shipping.book"]
    assert first.attributes == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "orders.create",
        "gen_ai.tool.call.id": first.attributes["saga.operation_id"],  # type: ignore[index]
        "saga.id": saga_id, "saga.step": 1, "saga.semantics": "COMPENSABLE",
        "saga.operation_id": first.attributes["saga.operation_id"], "saga.outcome": "COMMITTED",  # type: ignore[index]
    }
    assert first.status.status_code is StatusCode.UNSET
    assert second.attributes is not None
    assert second.attributes["saga.outcome"] == "UNKNOWN"
    assert second.attributes["error.type"] == "TimeoutError"
    assert second.status.status_code is StatusCode.ERROR
    [event] = second.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "TimeoutError"
    assert event.attributes["exception.message"] == "the carrier did not answer"

    undo_second, undo_first = found["saga.rollback.shipping.book"], found["saga.rollback.orders.create"]
    assert undo_second.start_time is not None and undo_first.start_time is not None
    assert undo_second.start_time < undo_first.start_time  # newest first
    for undo, step in ((undo_first, 1), (undo_second, 2)):
        assert undo.attributes is not None
        assert undo.attributes["saga.outcome"] == "compensated"
        assert undo.attributes["saga.step"] == step
        assert "saga.compensation" not in undo.attributes  # its label carries the undo's arguments
        assert undo.status.status_code is StatusCode.UNSET

    # The log lines of that saga carry its trace id, and each step's line its span id.
    lines = log_lines.of(saga_id)
    assert len(lines) == 5  # two steps, two undos, the end
    trace_id = format(root.context.trace_id, "032x")
    assert {line["trace_id"] for line in lines} == {trace_id}
    step_lines = [line for line in lines if line["step_id"] == 2 and "shipping.book (COMPENSABLE) UNKNOWN" in line["message"]]
    assert [line["span_id"] for line in step_lines] == [format(second.context.span_id, "016x")]
    assert lines[-1]["message"].startswith(f"saga {saga_id} ROLLED_BACK")


async def test_an_unclean_rollback_is_failed(spans: InMemorySpanExporter) -> None:
    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: "sent")
            raise RuntimeError("the model changed its mind")
    found = by_name(spans)
    assert found["saga.execute"].attributes["saga.status"] == "FAILED"  # type: ignore[index]
    assert found["saga.execute"].attributes["saga.rollback.orphaned"] == 1  # type: ignore[index]
    undo = found["saga.rollback.wire.send"]
    assert undo.attributes["saga.outcome"] == "orphaned"  # type: ignore[index]
    assert undo.status.status_code is StatusCode.ERROR


def test_a_completed_saga_and_the_blocking_face(spans: InMemorySpanExporter) -> None:
    @tool(semantics="REVERSIBLE")
    def lookup(sku: str) -> int:
        return 3

    with saga_scope(MemoryWAL()) as s:
        s.execute(tool="stock.lookup", semantics="REVERSIBLE", forward=lambda: 3)
        assert lookup("x") == 3
    found = by_name(spans)
    assert found["saga.execute"].attributes["saga.status"] == "COMPLETED"  # type: ignore[index]
    assert found["saga.execute"].status.status_code is StatusCode.UNSET
    assert found["saga.step.lookup"].attributes["saga.step"] == 2  # type: ignore[index]


async def test_spans_nest_under_the_current_span_and_the_tools_spans_under_the_step(
    spans: InMemorySpanExporter, provider: TracerProvider
) -> None:
    framework = provider.get_tracer("some-agent-framework")

    def charge() -> dict[str, str]:
        with framework.start_as_current_span("POST /v1/charges"):  # what an HTTP client's instrumentation makes
            return {"id": "ch_1"}

    with framework.start_as_current_span("invoke_agent billing") as agent:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="billing.charge", semantics="REVERSIBLE", forward=charge)
    found = by_name(spans)
    assert found["saga.execute"].parent.span_id == agent.get_span_context().span_id  # type: ignore[union-attr]
    step = found["saga.step.billing.charge"]
    assert found["POST /v1/charges"].parent.span_id == step.context.span_id  # type: ignore[union-attr]


async def test_arguments_and_results_only_when_asked(provider: TracerProvider, spans: InMemorySpanExporter) -> None:
    from agent_saga import setup_telemetry

    async def run() -> None:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="crm.update", semantics="REVERSIBLE", forward=lambda: {"ok": True},
                            args={"contact": "c-9", "api_key": "sk_live_abcdef123456"})

    exporter = InMemorySpanExporter()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run()  # the fixture's default: no content
    [default] = [s for s in exporter.get_finished_spans() if s.name == "saga.step.crm.update"]
    assert default.attributes is not None
    assert not {k for k in default.attributes if k.startswith("gen_ai.tool.call.") and k != "gen_ai.tool.call.id"}

    exporter.clear()
    telemetry = setup_telemetry(provider, capture_content=True)
    try:
        await run()
    finally:
        telemetry.close()
    [captured] = [s for s in exporter.get_finished_spans() if s.name == "saga.step.crm.update"]
    assert captured.attributes is not None
    assert captured.attributes["gen_ai.tool.call.arguments"] == '{"api_key": "<redacted: secret>", "contact": "c-9"}'
    assert captured.attributes["gen_ai.tool.call.result"] == '{"ok": true}'


def test_setup_twice_replaces_and_close_removes_everything(provider: TracerProvider, spans: InMemorySpanExporter) -> None:
    from agent_saga import setup_telemetry
    from agent_saga.engine.observe import interceptors

    before = interceptors()
    again = setup_telemetry(provider)
    assert len(interceptors()) == len(before)  # replaced, not stacked
    again.close()
    assert interceptors() == ()
    with saga_scope(MemoryWAL()) as s:
        s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1)
    assert spans.get_finished_spans() == ()


def test_bad_input_is_refused(provider: TracerProvider) -> None:
    from agent_saga import setup_telemetry

    with pytest.raises(TypeError, match="capture_content"):
        setup_telemetry(provider, capture_content="yes")  # type: ignore[arg-type]


def test_importing_agent_saga_never_imports_opentelemetry_or_fastapi() -> None:
    code = (
        "import sys, logging\n"
        "import agent_saga\n"
        "agent_saga.configure_logging()\n"
        "with agent_saga.saga_scope(agent_saga.MemoryWAL()) as s:\n"
        "    s.execute(tool='a', semantics='REVERSIBLE', forward=lambda: 1)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'fastapi', 'starlette'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # ... while both are installed here, so the absence above is the library's doing.
    done = subprocess.run([sys.executable, "-c", "import opentelemetry.trace, fastapi"], check=False)
    assert done.returncode == 0
