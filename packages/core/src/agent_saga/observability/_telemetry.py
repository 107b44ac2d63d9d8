"""OpenTelemetry spans for sagas, steps and rollbacks (``pip install 'agent-saga[opentelemetry]>=3.0.0'``).

``setup_telemetry()`` adds one interceptor to the engine's chain, so every front door
(``saga.execute``, ``@tool``, the adapters, the MCP proxy) is traced the same way:

* ``saga.execute`` -- one per saga, child of whatever span is current where the saga
  starts (a request's, a framework's agent span); ``saga.status`` is COMPLETED,
  ROLLED_BACK (every effect undone) or FAILED (something may still stand);
* ``saga.step.<tool>`` -- one per step, with the OpenTelemetry GenAI attributes of a
  tool execution (``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``) beside the ``saga.*`` ones; a failed call is recorded as an
  exception with ERROR status;
* ``chat <model>`` -- instead, for a model call ``patch_all()`` made a step (the OpenAI SDK's
  ``chat.completions.create`` / ``responses.create``): the GenAI attributes of an inference
  (``gen_ai.system``, ``gen_ai.operation.name = chat``, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``);
* ``saga.rollback.<tool>`` -- one per step settled by a rollback, with its outcome.

A step a resumed durable run was served from the log has ``saga.served = true``; a served model
call's span carries no token usage (those tokens were spent by the run that made the call).

Each span is current while its work runs, so spans the tool makes (an HTTP client's)
nest under the step, and log records carry its trace and span ids. Arguments and
results are not put on spans unless ``capture_content=True``: a tracing backend is
usually a third party nobody classified as a store for that data.

This module imports ``opentelemetry``; ``import agent_saga`` never does.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError as missing:  # pragma: no cover - exercised in an env without the extra
    raise ImportError(
        "setup_telemetry() needs OpenTelemetry's API: pip install 'agent-saga[opentelemetry]>=3.0.0'"
    ) from missing

from agent_saga._version import __version__
from agent_saga.engine import observe
from agent_saga.engine.report import StepOutcome
from agent_saga.observability import _correlation as correlation
from agent_saga.redaction import scrub_text
from agent_saga.semantics import Outcome

__all__ = ["Telemetry", "setup_telemetry"]

# OpenTelemetry GenAI semantic conventions (development status), tool execution span.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_RESULT = "gen_ai.tool.call.result"
# ... and of a model call (inference span).
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
#: A step a resumed run was answered from the log: nothing ran, no tokens were spent.
SERVED = "saga.served"


@dataclass(frozen=True)
class _ModelCall:
    """What a model-call step's span says it is, and where its response counts the tokens."""

    system: str  # gen_ai.system
    operation: str  # gen_ai.operation.name
    usage: tuple[str, str]  # the response usage's fields of input and output tokens


#: The model-call steps ``patch_all()`` makes (agent_saga.runtime._model_steps), by (tool, origin).
_MODEL_CALLS = {
    ("openai.chat.completions.create", "openai"): _ModelCall("openai", "chat", ("prompt_tokens", "completion_tokens")),
    ("openai.responses.create", "openai"): _ModelCall("openai", "chat", ("input_tokens", "output_tokens")),
}


def _error_type(err: BaseException) -> str:
    kind = type(err)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _json(value: Any) -> str:
    return scrub_text(json.dumps(value, default=repr, sort_keys=True))


def _record_exception(span: trace.Span, err: BaseException) -> None:
    # The exception's text and traceback may echo a secret this process knows: scrubbed
    # (the attributes given here replace the ones record_exception would derive).
    trace_text = "".join(traceback.format_exception(err))
    span.record_exception(err, attributes={
        "exception.message": scrub_text(str(err)), "exception.stacktrace": scrub_text(trace_text),
    })


class _Spans(observe.Interceptor):
    """The interceptor: opens a span before the work, makes it current, ends it after."""

    def __init__(self, tracer: trace.Tracer, capture_content: bool) -> None:
        self.tracer = tracer
        self.capture_content = capture_content

    def _run(self, name: str, attributes: dict[str, Any]) -> tuple[trace.Span, object]:
        span = self.tracer.start_span(name, kind=trace.SpanKind.INTERNAL, attributes=attributes)
        return span, otel_context.attach(trace.set_span_in_context(span))

    @staticmethod
    def _finish(span: trace.Span, token: object) -> None:
        span.end()
        otel_context.detach(token)  # type: ignore[arg-type]

    def saga(self, event: observe.SagaEvent) -> observe.Wrapper:
        attributes: dict[str, Any] = {"saga.id": event.saga_id, "saga.name": event.name}
        if event.tags:
            attributes["saga.tags"] = sorted(event.tags)
        span, token = self._run("saga.execute", attributes)
        end: observe.SagaEnd = yield
        try:
            status = correlation.saga_outcome(end)
            span.set_attribute("saga.status", status)
            span.set_attribute("saga.end", end.status)  # the engine's own word (ABANDONED, FROZEN ...)
            report = end.report
            if report is not None:
                span.set_attribute("saga.rollback.clean", report.clean)
                for outcome in Outcome:
                    count = len(report.with_outcome(outcome))
                    if count:
                        span.set_attribute(f"saga.rollback.{outcome.value}", count)
            if status != "COMPLETED":
                why = report.cause if report is not None else f"the saga ended {end.status}"
                span.set_status(trace.Status(trace.StatusCode.ERROR, why))
        finally:
            self._finish(span, token)

    def step(self, event: observe.StepEvent) -> observe.Wrapper:
        op = event.operation_id
        model_call = _MODEL_CALLS.get((event.tool, event.origin or ""))
        name, attributes = _named(event, model_call)
        attributes.update({
            "saga.id": event.saga_id,
            "saga.step": event.step,
            "saga.semantics": event.semantics.value,
            "saga.operation_id": op,
        })
        if event.origin is not None:
            attributes["saga.origin"] = event.origin
        if event.via_fallback:
            attributes["saga.via_fallback"] = True
        if event.served:
            attributes[SERVED] = True
        if self.capture_content:
            attributes[GEN_AI_TOOL_ARGUMENTS] = _json(dict(event.args))  # as logged: secrets redacted
        span, token = self._run(name, attributes)
        end: observe.StepEnd = yield
        try:
            span.set_attribute("saga.outcome", end.state.value)
            if model_call is not None:
                span.set_attributes(_response_attributes(end.result, model_call.usage, event.served))
            if end.error is not None:
                _record_exception(span, end.error)
                span.set_attribute(ERROR_TYPE, _error_type(end.error))
                span.set_status(trace.Status(
                    trace.StatusCode.ERROR, f"{type(end.error).__name__}: {scrub_text(str(end.error))}"
                ))
            elif self.capture_content:
                span.set_attribute(GEN_AI_TOOL_RESULT, _json(end.result))
        finally:
            self._finish(span, token)

    def rollback_step(self, event: observe.RollbackEvent) -> observe.Wrapper:
        attributes: dict[str, Any] = {
            "saga.id": event.saga_id,
            "saga.step": event.step,
            "saga.semantics": event.semantics.value,
        }
        if event.handler is not None:
            attributes["saga.compensation.handler"] = event.handler  # a name: no argument shown
        if event.compensation is not None and self.capture_content:
            attributes["saga.compensation"] = scrub_text(event.compensation)  # its label shows the undo's arguments
        if event.idempotency_key is not None:
            attributes["saga.operation_id"] = event.idempotency_key
        span, token = self._run(f"saga.rollback.{event.tool}", attributes)
        outcome: StepOutcome = yield
        try:
            span.set_attribute("saga.outcome", outcome.outcome.value)
            span.set_attribute("saga.attempts", outcome.attempts)
            if outcome.outcome not in (Outcome.COMPENSATED, Outcome.KEPT):
                # The step's effect may still stand: failed undo, orphaned, unresolved.
                span.set_attribute(ERROR_TYPE, outcome.outcome.value)
                span.set_status(trace.Status(trace.StatusCode.ERROR, scrub_text(outcome.detail) or outcome.outcome.value))
        finally:
            self._finish(span, token)


def _named(event: observe.StepEvent, model_call: _ModelCall | None) -> tuple[str, dict[str, Any]]:
    """A step span's name and GenAI attributes: a tool's execution, or a model call's inference.

    A model call's span is named as the conventions name an inference span: ``chat gpt-4o``.
    """
    if model_call is None:
        return f"saga.step.{event.tool}", {
            GEN_AI_OPERATION: "execute_tool", GEN_AI_TOOL_NAME: event.tool, GEN_AI_TOOL_CALL_ID: event.operation_id,
        }
    attributes: dict[str, Any] = {GEN_AI_OPERATION: model_call.operation, GEN_AI_SYSTEM: model_call.system}
    requested = event.args.get("model")
    if not isinstance(requested, str):
        return model_call.operation, attributes
    return f"{model_call.operation} {requested}", {**attributes, GEN_AI_REQUEST_MODEL: requested}


def _response_attributes(result: Any, usage_fields: tuple[str, str], served: bool) -> dict[str, Any]:
    """A model call's response model and token usage, as the GenAI conventions name them.

    A served call's usage is left out: its tokens were spent by the run that made the call,
    and a dashboard summing usage would count them twice.
    """
    if not isinstance(result, dict):
        return {}
    found: dict[str, Any] = {}
    if isinstance(result.get("model"), str):
        found[GEN_AI_RESPONSE_MODEL] = result["model"]
    usage = result.get("usage")
    if not served and isinstance(usage, dict):
        for attribute, field_name in zip((GEN_AI_INPUT_TOKENS, GEN_AI_OUTPUT_TOKENS), usage_fields, strict=True):
            if isinstance(usage.get(field_name), int):
                found[attribute] = usage[field_name]
    return found


def _current_ids() -> tuple[str, str] | None:
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return trace.format_trace_id(found.trace_id), trace.format_span_id(found.span_id)


@dataclass(frozen=True)
class Telemetry:
    """What :func:`setup_telemetry` installed; ``close()`` takes it out again."""

    tracer: trace.Tracer
    _interceptor: _Spans

    def close(self) -> None:
        _slot.uninstall(self, self._take_out)

    def _take_out(self) -> None:
        observe.remove_interceptor(self._interceptor)
        correlation.set_trace_source(None)


_slot = correlation.Slot("telemetry")


def setup_telemetry(
    tracer_provider: trace.TracerProvider | None = None, *, capture_content: bool = False
) -> Telemetry:
    """Trace every saga, step and rollback from now on; returns a handle whose ``close()`` stops it.

    ``tracer_provider`` defaults to the global one (``trace.set_tracer_provider``; until
    an SDK sets one, spans cost next to nothing and go nowhere). ``capture_content=True``
    adds each step's arguments (as logged: secret-looking ones redacted) and result to
    its span. Calling it again replaces the previous setup.
    """
    if not isinstance(capture_content, bool):
        raise TypeError(f"setup_telemetry(capture_content=...) takes True or False, got {capture_content!r}")
    tracer = trace.get_tracer("agent_saga", __version__, tracer_provider=tracer_provider)
    spans = _Spans(tracer, capture_content)

    def put() -> Telemetry:
        observe.add_interceptor(spans)
        correlation.set_trace_source(_current_ids)
        return Telemetry(tracer, spans)

    return _slot.install(put)
