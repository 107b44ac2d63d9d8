"""Check a hash-chained log and name the first record that does not add up.

The checker itself lives in the log layer (``agent_saga.log.chain``), because
recovery refuses to act on a log that does not verify and must not import the
audit tools. This module is the auditor's face of it: ``verify_log`` for a file,
``verify_records`` for records already read, and the rule in prose that every
export bundle carries.

Statuses: ``intact`` (every record chained and checked), ``empty`` (no records),
``broken`` (``bad_seq``, ``bad_line``, ``reason``), ``unchained`` (written with
``chain=False``), ``partial`` (an unchained start, then a chain). A record
without chain fields *after* a chained one is a break, never partial.
"""

from __future__ import annotations

import os

from agent_saga.log.chain import Progress, VerifyReport, verify_file, verify_records

__all__ = ["VERIFICATION_RULE", "VerifyReport", "verify_log", "verify_records"]

VERIFICATION_RULE = (
    "Each line of records.jsonl is one JSON record. Its header is the object made of the fields "
    "digest, prev, saga, seq, step, ts, type that the record has, serialised as canonical JSON "
    "(UTF-8, keys sorted, separators ',' and ':' with no spaces, non-ASCII characters written "
    "as themselves). hash must equal the lowercase hex SHA-256 of that header. If the record has "
    "body and salt, digest must equal SHA-256 over the 16 bytes whose hex is salt followed by the "
    "canonical JSON of body; if it has enc and salt (an encrypted body), SHA-256 over the salt "
    "bytes followed by the ASCII text of enc. A record with neither body nor salt was redacted: "
    "only its header is checked, and a REDACTION record must list its seq. Once a record is chained, "
    "every later record must be chained too (a line without these fields after a chained one is a "
    "break). seq must strictly "
    "increase from line to line; prev of the first record is 64 zeros (unless the head of the "
    "log was compacted away) and prev of every other record is the hash of the line before it. "
    "Where seq jumps, a COMPACTION record's body.removed ranges must cover every missing seq, "
    "and prev of the record after the gap must equal the attested last_hash of the range ending "
    "just before it. A COMPACTION or REDACTION record counts only if body.signature is an Ed25519 "
    "signature, by a key the operator trusts (body.signature.key names it), over the UTF-8 bytes of "
    "'agent-saga log attestation v1' and a newline followed by the canonical JSON of {type, seq, "
    "prev (null if absent), body without signature}; a COMPACTION's body.sagas must name each "
    "removed saga with its terminal record (SAGA_COMPLETED, or SAGA_ROLLED_BACK with clean true), "
    "lying in a removed range, and its counts must add up. "
    "The hash of the last line is the chain head. The file's own SHA-256 is in "
    "manifest.json and SHA256SUMS (check with: sha256sum -c SHA256SUMS)."
)


def verify_log(
    path: str | os.PathLike[str], *, expect_head: str | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Verify the log file at ``path``, reading it one line at a time.

    ``expect_head`` is a chain head taken earlier (say, from an export manifest):
    the log must still hold the record with that hash, which catches records cut
    off the end — the one edit a chain cannot reveal by itself. ``progress(done,
    total)`` is called now and then with bytes read. Raises OSError if the file
    cannot be read (``NotARegularFile`` for a directory, FIFO or device).
    """
    return verify_file(path, expect_head=expect_head, progress=progress)
