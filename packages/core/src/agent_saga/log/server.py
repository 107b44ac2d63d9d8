"""What the server-backed logs share about reading records back.

A server log stores each record as the exact line the sealer produced, so a
reader decodes it as a file reader decodes a line; an encrypted record is
opened with the log's key (default: ``$AGENT_SAGA_WAL_KEY``) and, like in a
file, never returned silently without its body.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from agent_saga.errors import WALCorrupt, WALError
from agent_saga.log.codec import BodyCipher, decode_line
from agent_saga.log.records import Record

__all__ = ["LogNotFound", "decode_stored", "open_stored", "split_url"]


class LogNotFound(WALError, FileNotFoundError):
    """A server log that was to be read does not exist (a tool that only reads never creates one)."""


def open_stored(line: str, where: str) -> Record:
    """One stored line as a record, as stored (an encrypted body stays in ``enc``)."""
    try:
        return decode_line(line)
    except ValueError as err:
        raise WALCorrupt(f"{where}: a stored line is not a record ({err}); run 'agent-saga verify'") from err


def decode_stored(line: str, encryptor: BodyCipher | None, where: str) -> Record:
    """One stored line as a record with its body readable (raises if it needs a key we lack)."""
    record = open_stored(line, where)
    if "enc" in record:
        from agent_saga.log.crypto import open_record

        record = open_record(record, encryptor, where)
    return record


def split_url(url: str, **ours: str) -> tuple[str, dict[str, str], str]:
    """Split our own query parameters (named in ``ours``, with defaults) off a database URL.

    Returns the URL the driver gets, our parameters, and a printable location
    (no password; our parameters kept when not default, so it opens the same log).
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    found = dict(ours)
    rest = []
    for key, value in query:
        if key in ours:
            found[key] = value
        else:
            rest.append((key, value))
    # quote, not urlencode's default quote_plus: libpq reads a '+' literally, so
    # `options=-c name=value` would reach the server as '+name'.
    driver = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    shown_netloc = f"{user}@{netloc[2]}" if netloc[1] else netloc[2]
    shown_query = urlencode(rest + [(k, v) for k, v in found.items() if v != ours[k]], quote_via=quote)
    location = urlunsplit(parts._replace(netloc=shown_netloc, query=shown_query))
    return driver, found, location
