"""An error as records, reports and messages show it."""

from __future__ import annotations

from agent_saga.log.encodable import utf8_safe
from agent_saga.redaction import scrub_text

__all__ = ["describe_error"]


def describe_error(err: BaseException) -> str:
    # Where error text becomes records, reports and SagaAborted's message: a secret this
    # process knows (or a URL's password) echoed in it is scrubbed, and utf8_safe keeps
    # a lone surrogate in it from breaking the log.
    text = utf8_safe(scrub_text(str(err)))
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
