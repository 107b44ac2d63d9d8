"""``configure_logging()``: the library's lines, with their saga, step and trace ids.

Opt-in, and confined to the ``agent_saga`` logger: it adds one handler there (stderr
by default), sets that logger's level and, unless told otherwise, stops its records
from also reaching the root logger's handlers (they would print twice). The root
logger is never touched. Two formats: text for a person reading an incident, JSON
(one object per line) for a log pipeline.
"""

from __future__ import annotations

import json as _json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from agent_saga.observability import _correlation as correlation
from agent_saga.observability._correlation import FIELDS
from agent_saga.redaction import scrub_text

__all__ = ["JsonFormatter", "LoggingSetup", "TextFormatter", "configure_logging"]

LIBRARY_LOGGER = "agent_saga"


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Scrubbing(logging.Formatter):
    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        # A traceback quotes the exception's text, which may echo a secret this process knows.
        return scrub_text(super().formatException(ei))


class TextFormatter(_Scrubbing):
    """``2025-01-01T12:00:00.000Z WARNING agent_saga.saga [saga=… step=2 trace=…] message``."""

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{label}={value}"
            for label, value in (
                ("saga", getattr(record, "saga_id", None)),
                ("step", getattr(record, "step_id", None)),
                ("trace", getattr(record, "trace_id", None)),
                ("span", getattr(record, "span_id", None)),
            )
            if value is not None
        )
        text = f"{_timestamp(record)} {record.levelname} {record.name} " + (f"[{ids}] " if ids else "")
        text += record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(_Scrubbing):
    """One JSON object per line: ts, level, logger, message, the ids, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            entry[key] = getattr(record, key, None)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _json.dumps(entry, default=str)


@dataclass(frozen=True)
class LoggingSetup:
    """What :func:`configure_logging` installed; ``close()`` takes it out again."""

    handler: logging.Handler
    _previous: tuple[int, bool]

    def close(self) -> None:
        _slot.uninstall(self, self._take_out)

    def _take_out(self) -> None:
        logger = logging.getLogger(LIBRARY_LOGGER)
        logger.removeHandler(self.handler)
        logger.setLevel(self._previous[0])
        logger.propagate = self._previous[1]


_slot = correlation.Slot("logging")


def configure_logging(
    json: bool = False,
    *,
    level: int | str = logging.INFO,
    stream: IO[str] | None = None,
    propagate: bool = False,
) -> LoggingSetup:
    """Send the library's log lines to ``stream`` (stderr), each with its saga and step ids.

    ``json=True`` writes one JSON object per line. Every record of the ``agent_saga``
    loggers carries ``saga_id``, ``step_id`` (the step number) and, once
    :func:`setup_telemetry` ran, ``trace_id`` / ``span_id``; a line per saga, step and
    rollback step is written by ``agent_saga.saga``. ``propagate=True`` lets the
    records also reach the root logger's handlers. Calling it again replaces the
    previous setup; the returned object's ``close()`` removes it.
    """
    if not isinstance(json, bool):
        raise TypeError(f"configure_logging(json=...) takes True or False, got {json!r}")
    if isinstance(level, str):
        named = logging.getLevelNamesMapping().get(level.upper())
        if named is None:
            raise ValueError(f"configure_logging(level={level!r}): use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        level = named
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    logger = logging.getLogger(LIBRARY_LOGGER)

    def put() -> LoggingSetup:
        setup = LoggingSetup(handler, (logger.level, logger.propagate))  # as the previous one left it
        logger.setLevel(level)
        logger.addHandler(handler)
        logger.propagate = propagate
        return setup

    return _slot.install(put)
