"""The ``requests`` twin of :class:`~agent_saga.distributed.SagaTransport`: a transport adapter.

::

    session = requests.Session()
    session.mount("http://billing.internal:8001/", SagaAdapter())
    with saga_scope(wal):
        session.post("http://billing.internal:8001/charges/o-1")   # step http:billing

Same rules as the httpx transport: a step only inside a saga and only under a trusted
service's base URL; the answer read up to ``MAX_BODY`` bytes; the undo built from the
service's signed token. Needs ``requests`` (not part of any extra: bring your own).
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from agent_saga.context import current_saga
from agent_saga.distributed._client import StepArgs, answered, read_bounded, service_for, step_context
from agent_saga.distributed._header import HEADER
from agent_saga.distributed._token import TOKEN_HEADER
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.errors import ConfigurationError, NotApplied

__all__ = ["SagaAdapter"]


class SagaAdapter(HTTPAdapter):
    """A ``requests`` adapter: requests to trusted services inside a saga are its steps."""

    def __init__(
        self, *, reconcile: ReconcilePolicy | bool = True, wait_for_commit: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._options = StepArgs(reconcile, wait_for_commit)

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if HEADER in request.headers:
            raise ConfigurationError(
                "a request sent through SagaAdapter carries its own saga-context header: the adapter sets it "
                "(from the current saga's step); remove it"
            )
        saga = current_saga()
        url = urlsplit(request.url or "")
        service = service_for(url.scheme, url.hostname or "", url.port, url.path) if saga is not None else None
        if saga is None or service is None:
            return super().send(request, *args, **kwargs)
        kwargs["stream"] = True  # read here, bounded

        def forward(idempotency_key: str) -> dict[str, Any]:
            request.headers[HEADER] = step_context(saga, idempotency_key).header()
            try:
                response = super(SagaAdapter, self).send(request, *args, **kwargs)
            except requests.exceptions.ConnectionError as err:
                if _never_connected(err):
                    raise NotApplied(f"{service.name}: could not connect, nothing was sent") from err
                raise
            try:
                body = read_bounded(response.iter_content(65536), service)
            finally:
                response.close()
            tokens = [response.headers[TOKEN_HEADER]] if TOKEN_HEADER in response.headers else []
            return answered(service, idempotency_key, response.status_code, tokens,
                            response.headers.get("content-type"), body)

        result = saga.execute_sync(forward=forward, inline=True,
                                   **self._options.step(service, request.method or "GET", url.path))
        return _response(result, request)


def _never_connected(err: requests.exceptions.ConnectionError) -> bool:
    """Whether the connection was never made (then nothing was sent); a broken answer is not that."""
    if isinstance(err, requests.exceptions.ConnectTimeout):
        return True
    reason = getattr(err.args[0], "reason", None) if err.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _response(result: Any, request: requests.PreparedRequest) -> requests.Response:
    response = requests.Response()
    response.status_code = result["status"]
    headers: dict[str, str] = {}
    if result.get("content_type"):
        headers["content-type"] = result["content_type"]
    if result.get("token") is not None:
        headers[TOKEN_HEADER] = result["token"]
    response.headers = CaseInsensitiveDict(headers)
    response._content = base64.b64decode(result["body"])
    response.request = request
    response.url = request.url or ""
    response.encoding = requests.utils.get_encoding_from_headers(response.headers)
    return response
