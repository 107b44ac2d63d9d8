"""Export a log as a write-once audit bundle an auditor can check with sha256sum alone.

A bundle is a directory of three read-only files:

* ``records.jsonl`` — the log's lines up to its last record, byte for byte (a
  final record whose newline was lost gets it back; a torn fragment is left out);
* ``manifest.json`` — record count, first and last seq, the chain head, the
  SHA-256 of ``records.jsonl``, the chain verdict and the verification rule in prose;
* ``SHA256SUMS`` — both files' digests in the format ``sha256sum -c`` reads.

A chain that does not verify (broken, unchained or partial) is refused unless
``allow_broken=True``, and then the manifest says so (``"chain": "BROKEN at seq
N: ..."``): exporting it silently would turn damaged evidence into an
authoritative-looking artifact. The bundle is private to its owner (directory
0700, files 0400); share it deliberately.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent_saga.audit._verify import VERIFICATION_RULE
from agent_saga.log.chain import (
    Attestations,
    ChainChecker,
    ChainUnverified,
    Progress,
    VerifyReport,
    check_lines,
)
from agent_saga.log.fixture import SyntheticLog, is_synthetic, synthetic_note
from agent_saga.log.fs import fsync_dir, open_regular, private_dir, write_new
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import Record

__all__ = ["BUNDLE_FORMAT", "ChainBroken", "ExportResult", "export_bundle"]

BUNDLE_FORMAT = "agent-saga-audit-bundle/1"
#: The bundle's files: read-only for their owner. Hand a bundle over deliberately (chmod, copy).
BUNDLE_FILE_MODE = 0o400

#: What ``export_bundle`` raises for a log whose chain does not verify (broken, unchained, partial).
ChainBroken = ChainUnverified


@dataclass(frozen=True, slots=True)
class ExportResult:
    """Where the bundle went and what its manifest says."""

    out_dir: Path
    manifest: dict[str, Any]
    report: VerifyReport


def _write_readonly(path: Path, chunks: Iterable[bytes]) -> str:
    """Write ``chunks`` to a new read-only file, synced; return their SHA-256."""
    digest = hashlib.sha256()

    def hashed() -> Iterator[bytes]:
        for chunk in chunks:
            digest.update(chunk)
            yield chunk

    write_new(path, hashed(), BUNDLE_FILE_MODE)
    return digest.hexdigest()


def _record_lines(fh: BinaryIO, size: int) -> Iterator[bytes]:
    """The log's lines up to its last record, each with its newline (a torn fragment left out)."""
    for line in iter_lines(fh, 0, size):
        if not line.terminated and is_torn(line.raw):
            return
        yield line.raw + b"\n"


def export_bundle(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    allow_broken: bool = False,
    progress: Progress | None = None,
    source: str | None = None,
    synthetic_ok: bool = False,
) -> ExportResult:
    """Write the audit bundle of the log at ``path`` into ``out_dir`` (new or empty).

    The log is verified first and then copied, one line at a time, from the size
    it had under a shared lock (so never half a batch; records appended meanwhile
    are left for the next export). Raises ChainBroken (nothing written) when the
    chain is broken, unchained or partial, unless ``allow_broken``; FileExistsError
    if ``out_dir`` already holds files; OSError if the log cannot be read.
    ``source`` names the log in the manifest and in a refusal (default: its path;
    the CLI passes a server log's URL, whose snapshot ``path`` is). A log holding
    records made by ``synthesize`` raises SyntheticLog (nothing written) unless
    ``synthetic_ok``; then the manifest counts them and its notes say it is a fixture.
    """
    src = Path(path).absolute()
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out} already exists and is not an empty directory; a bundle is written once: "
            "choose a new --out directory"
        )
    with open_regular(path) as fh:
        # The size under the writers' lock is a batch boundary. Bytes below it never change:
        # writers only append, and a rewrite replaces the file, leaving this descriptor on
        # the old one. Records appended meanwhile are left for the next export.
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
        size = os.fstat(fh.fileno()).st_size
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        checker = ChainChecker(Attestations.scan(iter_lines(fh, 0, size)))
        synthetic = [0]

        def count_synthetic(record: Record) -> None:
            synthetic[0] += is_synthetic(record)

        notes = check_lines(iter_lines(fh, 0, size), checker, progress=progress, total=size,
                            on_record=count_synthetic)
        report = checker.report(notes)
        if not report.ok and not allow_broken:
            raise ChainBroken.refusing(
                source or src, report, "export it as evidence",
                "pass allow_broken=True to export it labelled with this verdict",
            )
        if synthetic[0] and not synthetic_ok:
            raise SyntheticLog(source or src, synthetic[0], report.records, "export it as evidence",
                               "pass synthetic_ok=True to export it as a test fixture")
        private_dir(out)
        records_sha = _write_readonly(out / "records.jsonl", _record_lines(fh, size))
        records_bytes = (out / "records.jsonl").stat().st_size
    from agent_saga._version import __version__

    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "generator": f"agent-saga {__version__}",
        "source": source or str(src),
        "records_file": "records.jsonl",
        "records_sha256": records_sha,
        "records_bytes": records_bytes,
        "record_count": report.records,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "chain": report.label,
        "chain_status": report.status,
        "chain_head": report.head,
        "redacted_seqs": list(report.redacted),
        "compacted_ranges": [list(r) for r in report.compacted],
        "notes": [*report.notes, *([synthetic_note(synthetic[0], report.records)] if synthetic[0] else [])],
        "synthetic_records": synthetic[0],
        "verification_rule": VERIFICATION_RULE,
    }
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    manifest_sha = _write_readonly(out / "manifest.json", [manifest_bytes])
    _write_readonly(out / "SHA256SUMS", [f"{records_sha}  records.jsonl\n{manifest_sha}  manifest.json\n".encode()])
    fsync_dir(out)
    fsync_dir(out.absolute().parent)
    return ExportResult(out, manifest, report)
