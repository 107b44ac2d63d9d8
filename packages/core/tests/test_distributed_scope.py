"""The remote step scope: declared undos are checked, and the scope crosses a hand-off like the saga does."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agent_saga import compensator
from agent_saga.adapter import carry
from agent_saga.distributed import RemoteStep, SagaContext, remote_step
from agent_saga.distributed._scope import entered, install
from agent_saga.errors import ConfigurationError
from agent_saga.plugins.manager import reset_plugins
from agent_saga.registry import unregister

STEP = RemoteStep("billing", SagaContext("ab" * 16, 1, "cd" * 16))


@pytest.fixture(autouse=True)
def registered_refund() -> Iterator[None]:
    compensator("test.scope.refund")(lambda order: None)
    reset_plugins()
    yield
    unregister("test.scope.refund")
    reset_plugins()


def test_outside_a_request_there_is_no_remote_step() -> None:
    with pytest.raises(ConfigurationError, match="only available while SagaContextMiddleware serves"):
        remote_step()


def test_the_scope_is_carried_to_a_worker_thread_by_the_propagation_hook() -> None:
    install()
    seen: list[RemoteStep | str] = []

    def work() -> None:
        try:
            remote_step().compensate_with("test.scope.refund", order="o-1")
            seen.append(remote_step())
        except ConfigurationError as err:
            seen.append(str(err))

    with entered(STEP):
        carried = carry(work)
    worker = threading.Thread(target=carried)  # a thread that never saw the request's context
    worker.start()
    worker.join()
    assert seen == [STEP] and (STEP.handler, STEP.kwargs) == ("test.scope.refund", {"order": "o-1"})


@pytest.mark.parametrize(("handler", "kwargs", "why"), [
    ("not.registered", {}, "no @compensator is registered"),
    ("test.scope.refund", {"at": object()}, "must be plain JSON"),
    ("test.scope.refund", {"amount": float("nan")}, "must be plain JSON"),
])
def test_an_undo_that_could_not_travel_is_refused(handler: str, kwargs: dict[str, object], why: str) -> None:
    with entered(RemoteStep("billing", STEP.context)) as step, pytest.raises(ConfigurationError, match=why):
        step.compensate_with(handler, **kwargs)
