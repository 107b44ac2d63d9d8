"""The proxy's own refusals of tool calls, recorded the way the engine records any refusal.

The engine writes ``STEP_REFUSED`` when a saga's gate refuses a step. The proxy also
refuses calls on grounds of its own (an undeclared tool, a line it will not forward, a
malformed request), and an audit of the log must see those too. So every saga the proxy
runs gets a :class:`ProxyGate`: the configured gate (or none) behind a refusal that
:func:`record_refusal` sets for the one step it records. The refusal travels in a context
variable, so steps running concurrently in other tasks never see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest
from agent_saga.engine.saga import Saga
from agent_saga.errors import StepRefused
from agent_saga.semantics import ActionSemantics

__all__ = ["ProxyGate", "record_refusal"]

_REFUSAL: ContextVar[StepRefused | None] = ContextVar("agent_saga_mcp_refusal", default=None)


class ProxyGate:
    """``inner`` (any gate, or None), preceded by the refusal :func:`record_refusal` set."""

    def __init__(self, inner: GatePort | None) -> None:
        self.inner = inner

    def admit(self, saga: SagaInfo) -> None:
        if self.inner is not None:
            self.inner.admit(saga)

    def check(self, request: StepRequest) -> None:
        _raise_if_refusing()
        if self.inner is not None:
            self.inner.check(request)

    async def check_async(self, request: StepRequest) -> None:
        _raise_if_refusing()
        if self.inner is not None:
            await self.inner.check_async(request)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        if self.inner is not None:
            self.inner.observe(request, error)


def _raise_if_refusing() -> None:
    refused = _REFUSAL.get()
    if refused is not None:
        raise refused


async def record_refusal(
    saga: Saga, refused: StepRefused, semantics: ActionSemantics, arguments: Mapping[str, Any]
) -> None:
    """Record ``refused`` as a refused step of ``saga`` (whose gate must be a ProxyGate)."""
    token = _REFUSAL.set(refused)
    try:
        await saga.execute(
            tool=refused.tool, semantics=semantics, forward=_never_called, args=arguments, inline=True,
            # A COMPENSABLE step must name its undo; the refusal comes before it is ever asked for.
            compensate=_never_called if semantics is ActionSemantics.COMPENSABLE else None,
        )
    except StepRefused as err:
        if err is not refused:
            raise
    finally:
        _REFUSAL.reset(token)


def _never_called(*_: Any) -> Any:
    raise AssertionError("a refused step never runs")
