"""What every connector shares: importing its client library lazily, and resolving a credential."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent_saga.context import current_saga
from agent_saga.credentials import (
    REF_KEY,
    CredentialError,
    assert_no_secrets,
    credential_ref,
    resolve_credentials,
)
from agent_saga.install import pip_install
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = ["ConflictError", "PrebuiltUndo", "require", "run_step", "secret"]


class ConflictError(RuntimeError):
    """An undo refused to overwrite a change someone else made after the saga's own.

    Retrying cannot help; the step's compensation fails, and the recovery daemon (or
    the agent's rollback) escalates it to a human with this message.
    """


def require(module: str, extra: str, connector: str) -> ModuleType:
    """Import ``module`` or fail with one line naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"agent_saga.connectors.{connector} needs the {module!r} package ({err}); install it "
            f"with: {pip_install('agent-saga', extra)}"
        ) from None


def secret(ref: str | Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The credential a reference names, resolved now, and the strings to scrub from errors.

    ``ref`` is a credential's name (``"stripe_prod"``, what the log records) or a
    :func:`~agent_saga.credentials.credential_ref`.
    """
    if isinstance(ref, str):
        assert_no_secrets(ref, where="credential_ref")  # a key pasted where its name belongs
        ref = credential_ref(ref)
    if not (isinstance(ref, Mapping) and isinstance(ref.get(REF_KEY), str)):
        raise CredentialError(
            f"credential_ref must be a credential's name (or credential_ref('name')), got {type(ref).__name__}"
        )
    resolved, secrets = resolve_credentials({"value": ref})
    return resolved["value"], secrets


@dataclass(frozen=True, slots=True)
class PrebuiltUndo:
    """An undo known before the call (built from a snapshot), tightened by what the call returned.

    Declared ``known_before_call``: the engine calls it with None before the call and
    writes that undo with the step's intent (so a process that dies mid-call leaves an
    undo the daemon can run), then with the step's result, whose ``from_result`` fields
    (a row version, the values as stored) replace or add to ``kwargs``.
    """

    handler: str
    kwargs: dict[str, Any]
    from_result: tuple[str, ...] = ()
    known_before_call = True

    def __call__(self, result: Any) -> Compensation:
        got = {k: result[k] for k in self.from_result if k in result} if isinstance(result, Mapping) else {}
        return Compensation(handler=self.handler, kwargs={**self.kwargs, **got})


def run_step(tool: str, forward: Callable[[], Any], args: dict[str, Any], undo: PrebuiltUndo) -> Any:
    """Run ``forward`` as a COMPENSABLE step of the current saga, or plainly outside one."""
    saga = current_saga()
    if saga is None:
        return forward()
    return saga.execute_sync(tool=tool, semantics=ActionSemantics.COMPENSABLE, forward=forward, args=args,
                             compensate=undo)
