"""The remote step scope a route runs in: the caller's context, and the undo the route declares.

:class:`SagaContextMiddleware` sets it around a request that carries a ``saga-context``;
the route calls :func:`remote_step` and declares how to undo what it did
(``remote_step().compensate_with("billing.refund", charge_id=...)``): a handler registered
with ``@compensator`` and JSON arguments, as everywhere. The scope is a context variable,
carried to the threads a framework hands work to by the propagation hook
(``agent_saga_capture``), as the current saga is.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from agent_saga.distributed._header import SagaContext
from agent_saga.errors import ConfigurationError
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.manager import plugins
from agent_saga.registry import registered

__all__ = ["RemoteStep", "remote_step"]

_current: contextvars.ContextVar[RemoteStep | None] = contextvars.ContextVar("agent_saga_remote_step", default=None)
PLUGIN = "agent_saga.distributed"


@dataclass(slots=True)
class RemoteStep:
    """One request's part of a caller's saga, as the route sees it."""

    service: str
    context: SagaContext
    handler: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def compensate_with(self, handler: str, /, **kwargs: Any) -> None:
        """Declare the undo of what this request did: ``handler(**kwargs)``, once, if the caller rolls back.

        ``handler`` must be registered here with ``@compensator``; ``kwargs`` must be
        plain JSON (they travel signed in the token). Declaring again replaces the undo.
        """
        if not isinstance(handler, str) or not registered(handler):
            raise ConfigurationError(
                f"compensate_with({handler!r}): no @compensator is registered under that name in this "
                "service; register the undo with @compensator(name) and import it before serving"
            )
        try:
            json.dumps(kwargs, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ConfigurationError(
                f"compensate_with({handler!r}): the kwargs must be plain JSON ({err}); pass identifiers"
            ) from None
        self.handler, self.kwargs = handler, dict(kwargs)


def remote_step() -> RemoteStep:
    """The remote step of the request being served; ConfigurationError outside one."""
    step = _current.get()
    if step is None:
        raise ConfigurationError(
            "remote_step() is only available while SagaContextMiddleware serves a request that carries "
            "a saga-context header (add the middleware to the app; call it from the route)"
        )
    return step


@contextlib.contextmanager
def entered(step: RemoteStep) -> Iterator[RemoteStep]:
    token = _current.set(step)
    try:
        yield step
    finally:
        _current.reset(token)


class _Carry:
    """Carries the remote step scope across a hand-off (``agent_saga.adapter.carry``)."""

    @hookimpl
    def agent_saga_capture(self) -> Callable[[], AbstractContextManager[Any]] | None:
        step = _current.get()
        if step is None:
            return None
        return lambda: entered(step)


def install() -> None:
    """Register the propagation plugin (idempotent)."""
    plugins().register(_Carry(), PLUGIN)
