"""Observability: log lines and spans that say which saga and step they belong to.

``_correlation`` keeps the saga and step ids in contextvars (an interceptor of the
engine's chain) and stamps them on the library's log records; ``_logs`` holds
``configure_logging``; ``_telemetry`` (imports ``opentelemetry``, so it is imported
only by ``setup_telemetry``) the OpenTelemetry spans.
"""

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.observability._correlation import CorrelationFilter, current_ids
from agent_saga.observability._logs import JsonFormatter, LoggingSetup, TextFormatter, configure_logging

__all__ = ["CorrelationFilter", "JsonFormatter", "LoggingSetup", "TextFormatter", "configure_logging", "current_ids"]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
