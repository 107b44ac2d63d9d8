"""Export a log as a write-once audit bundle an auditor can check with sha256sum alone.

A bundle is a directory of three read-only files:

* ``records.jsonl`` — the log's complete lines, byte for byte;
* ``manifest.json`` — record count, first and last seq, the chain head, the
  SHA-256 of ``records.jsonl``, the chain verdict and the verification rule in prose;
* ``SHA256SUMS`` — both files' digests in the format ``sha256sum -c`` reads.

A broken chain is refused unless ``allow_broken=True``, and then the manifest says
``"chain": "BROKEN at seq N: ..."``: exporting it silently would turn damaged
evidence into an authoritative-looking artifact.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga.audit.verify import (
    VERIFICATION_RULE,
    Progress,
    VerifyReport,
    parse_log_bytes,
    verify_entries,
)
from agent_saga.errors import WALError
from agent_saga.log.file import fsync_dir

__all__ = ["BUNDLE_FORMAT", "ChainBroken", "ExportResult", "export_bundle"]

BUNDLE_FORMAT = "agent-saga-audit-bundle/1"


class ChainBroken(WALError):
    """The log's chain does not verify; ``report`` says where and why."""

    def __init__(self, message: str, report: VerifyReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True, slots=True)
class ExportResult:
    """Where the bundle went and what its manifest says."""

    out_dir: Path
    manifest: dict[str, Any]
    report: VerifyReport


def _write_readonly(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def export_bundle(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    allow_broken: bool = False,
    progress: Progress | None = None,
    source: str | None = None,
) -> ExportResult:
    """Write the audit bundle of the log at ``path`` into ``out_dir`` (new or empty).

    The snapshot is taken under a shared lock, so it never includes half a batch.
    Raises ChainBroken (nothing written) for a broken chain unless ``allow_broken``,
    FileExistsError if ``out_dir`` already holds files, OSError if the log cannot be read.
    ``source`` names the log in the manifest (default: its path; the CLI passes a server log's URL).
    """
    from agent_saga.log.maintenance import locked_log

    src = Path(path).absolute()
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out} already exists and is not an empty directory; a bundle is written once: "
            "choose a new --out directory"
        )
    with locked_log(src, exclusive=False) as fd:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
    complete = data[: data.rfind(b"\n") + 1]
    entries, notes = parse_log_bytes(complete)
    if len(complete) < len(data):
        notes.append(
            f"{len(data) - len(complete)} bytes after the last newline (a torn final line, never "
            "acknowledged as durable) are not part of the bundle"
        )
    report = verify_entries(entries, notes=notes, progress=progress)
    if report.status == "broken" and not allow_broken:
        raise ChainBroken(
            f"{src}: the chain is {report.label}; refusing to export it as evidence. Pass "
            "allow_broken=True (--allow-broken) to export it labelled as broken",
            report,
        )
    records_sha = hashlib.sha256(complete).hexdigest()
    from agent_saga._version import __version__

    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "generator": f"agent-saga {__version__}",
        "source": source or str(src),
        "records_file": "records.jsonl",
        "records_sha256": records_sha,
        "records_bytes": len(complete),
        "record_count": report.records,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "chain": report.label,
        "chain_status": report.status,
        "chain_head": report.head,
        "redacted_seqs": list(report.redacted),
        "compacted_ranges": [list(r) for r in report.compacted],
        "notes": list(report.notes),
        "verification_rule": VERIFICATION_RULE,
    }
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    sums = (
        f"{records_sha}  records.jsonl\n"
        f"{hashlib.sha256(manifest_bytes).hexdigest()}  manifest.json\n"
    ).encode()
    out.mkdir(parents=True, exist_ok=True)
    _write_readonly(out / "records.jsonl", complete)
    _write_readonly(out / "manifest.json", manifest_bytes)
    _write_readonly(out / "SHA256SUMS", sums)
    fsync_dir(out)
    fsync_dir(out.absolute().parent)
    return ExportResult(out, manifest, report)
