"""The records of a whole log, however a caller holds them.

The tools that read a log whole (the corpus, counterfactual replay, the failure model, the
synthetic profile) take the same four forms, read one way: a file log's path, a log object
(anything with ``records()``), the dicts ``read_records`` yields, or the lines of a log file
(strings, or what ``json.loads`` made of them, as in a bug report's snippet). Anything else is
refused naming the item, never skipped: a record silently dropped is a saga misread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from agent_saga.log.file import read_records
from agent_saga.log.records import Record

__all__ = ["log_records"]


def log_records(source: Any, *, caller: str) -> list[Record]:
    """Every record of ``source`` (see the module), in order; a one-line ``TypeError`` otherwise."""
    if isinstance(source, (str, os.PathLike)):
        return list(read_records(source))
    reader = getattr(source, "records", None)
    if callable(reader):
        return list(reader())
    if isinstance(source, (bytes, Mapping)) or not isinstance(source, Iterable):
        raise TypeError(f"{caller}: {type(source).__name__} is not a log: {_FORMS}")
    records: list[Record] = []
    for number, item in enumerate(source, start=1):
        if isinstance(item, (str, bytes)):
            if not item.strip():
                continue  # the blank line a file ends with
            try:
                item = json.loads(item)
            except ValueError:
                raise TypeError(f"{caller}: record {number} is not JSON: {_FORMS}") from None
        if not (isinstance(item, Mapping) and isinstance(item.get("type"), str) and isinstance(item.get("saga"), str)):
            raise TypeError(f"{caller}: record {number} is a {type(item).__name__}, not a log record: {_FORMS}")
        records.append(dict(item))
    return records


_FORMS = "pass a log file's path, a WAL, read_records(path), or json.loads of each line of a log file"
