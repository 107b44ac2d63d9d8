"""``agent-saga verify | export | certify``: check a log, bundle it, certify it.

Exit codes (as for every verb): 0 ok; 1 a finding (broken or unchained chain,
an unaccounted effect); 2 usage; 3 could not check (missing or unreadable file,
an encrypted log without its key).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from agent_saga.cli.logfile import readable_log
from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, CliError
from agent_saga.cli.progress import Progress

__all__ = ["register", "run_certify", "run_export", "run_verify"]


def _default_wal() -> str:
    return os.environ.get("AGENT_SAGA_WAL") or "agent-saga.wal"


def _add_wal(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wal-path", default=_default_wal(), metavar="P",
        help="the log: a file, or a postgresql:// or redis:// URL (default: $AGENT_SAGA_WAL or ./agent-saga.wal)",
    )


def register(verbs: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = verbs.add_parser(
        "verify", formatter_class=fmt,
        help="check the log's hash chain; exit 0 only if intact",
        description=(
            "Check every record's digest, hash, prev link and sequence, and name the first record "
            "that does not add up. A log written with chain=False is reported as unchained (exit 1)."
        ),
        epilog=(
            "example:\n  agent-saga verify --wal-path ./agent-saga.wal\n"
            "  agent-saga verify --wal-path ./agent-saga.wal --expect-head <hash from a manifest>\n\n"
            "exit codes: 0 intact, 1 broken/unchained/partial, 2 usage, 3 could not read the log\n"
        ),
    )
    _add_wal(p)
    p.add_argument("--expect-head", metavar="HASH", help="a chain head recorded earlier that the log must still contain")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run_verify)

    p = verbs.add_parser(
        "export", formatter_class=fmt,
        help="write a write-once audit bundle (records.jsonl, manifest.json, SHA256SUMS)",
        description=(
            "Copy the log verbatim into a new directory with a manifest (chain head, SHA-256, the "
            "verification rule in prose) and a SHA256SUMS file an auditor checks with sha256sum -c."
        ),
        epilog=(
            "example:\n  agent-saga export --wal-path ./agent-saga.wal --out ./audit-2026-07\n"
            "  (cd ./audit-2026-07 && sha256sum -c SHA256SUMS)\n\n"
            "exit codes: 0 exported, 1 chain broken (refused, or exported labelled with --allow-broken),\n"
            "2 usage, 3 could not read the log or write the bundle\n"
        ),
    )
    _add_wal(p)
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory for the bundle")
    p.add_argument("--allow-broken", action="store_true", help="export a broken chain, labelled BROKEN in the manifest")
    p.set_defaults(run=run_export)

    p = verbs.add_parser(
        "certify", formatter_class=fmt,
        help="prove every committed effect was compensated or kept by a completed saga",
        description=(
            "Read the log and name every committed effect (COMPENSABLE or IRREVERSIBLE step, or an "
            "UNKNOWN outcome) that no record accounts for. Non-zero exit fails a CI gate."
        ),
        epilog=(
            "example:\n  agent-saga certify --wal-path ./agent-saga.wal\n"
            "  AGENT_SAGA_WAL_KEY=... agent-saga certify --wal-path ./encrypted.wal --json\n\n"
            "exit codes: 0 certified, 1 an effect is unaccounted for (or the chain is broken),\n"
            "2 usage, 3 could not read the log (missing, unreadable, or encrypted without a key)\n"
        ),
    )
    _add_wal(p)
    p.add_argument("--json", action="store_true", help="print the certificate as JSON")
    p.set_defaults(run=run_certify)


def _unreadable(path: str, err: OSError) -> CliError:
    reason = err.strerror or type(err).__name__
    if isinstance(err, FileNotFoundError):
        return CliError(f"cannot read {path}: no such file (pass --wal-path, or set $AGENT_SAGA_WAL)", EXIT_UNCHECKED)
    return CliError(f"cannot read {path}: {reason}", EXIT_UNCHECKED)


def run_verify(args: argparse.Namespace) -> int:
    from agent_saga.audit.verify import verify_log

    try:
        with readable_log(args.wal_path) as path:
            if path.is_dir():
                raise CliError(f"{args.wal_path} is a directory, not a log file", EXIT_UNCHECKED)
            with Progress("verifying records") as progress:
                report = verify_log(path, expect_head=args.expect_head, progress=progress)
    except OSError as err:
        raise _unreadable(args.wal_path, err) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"{args.wal_path}")
        print(report.format_text())
        if report.status == "broken":
            where = f"seq {report.bad_seq}" if report.bad_seq is not None else f"line {report.bad_line}"
            print(f"FIRST BAD RECORD: {where} (line {report.bad_line}): {report.reason}")
    return EXIT_OK if report.ok else EXIT_FINDING


def run_export(args: argparse.Namespace) -> int:
    from agent_saga.audit.export import ChainBroken, export_bundle
    from agent_saga.log.resolve import is_url

    path = Path(args.wal_path)
    try:
        with readable_log(args.wal_path) as path:
            if path.is_dir():
                raise CliError(f"{args.wal_path} is a directory, not a log file", EXIT_UNCHECKED)
            with Progress("verifying records") as progress:
                result = export_bundle(path, args.out, allow_broken=args.allow_broken, progress=progress,
                                       source=args.wal_path if is_url(args.wal_path) else None)
    except ChainBroken as err:
        raise CliError(str(err), EXIT_FINDING) from None
    except FileExistsError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None
    except OSError as err:
        if err.filename is not None and str(err.filename) != str(path.absolute()) \
                and str(err.filename) != str(path):
            raise CliError(f"cannot write the bundle at {err.filename}: {err.strerror}", EXIT_UNCHECKED) from None
        raise _unreadable(args.wal_path, err) from None
    m = result.manifest
    print(f"exported {m['record_count']} records (seq {m['first_seq']}..{m['last_seq']}) to {result.out_dir}")
    print(f"chain: {m['chain']}")
    print(f"head: {m['chain_head']}")
    print(f"records.jsonl sha256: {m['records_sha256']}")
    print(f"check it anywhere with: (cd {result.out_dir} && sha256sum -c SHA256SUMS)")
    return EXIT_FINDING if result.report.status == "broken" else EXIT_OK


def run_certify(args: argparse.Namespace) -> int:
    from agent_saga.audit.certify import certify_log
    from agent_saga.log.crypto import EncryptionError

    try:
        with readable_log(args.wal_path) as path:
            if path.is_dir():
                raise CliError(f"{args.wal_path} is a directory, not a log file", EXIT_UNCHECKED)
            cert = certify_log(path)
    except OSError as err:
        raise _unreadable(args.wal_path, err) from None
    except (EncryptionError, ImportError) as err:
        raise CliError(f"cannot read {args.wal_path}: {err}", EXIT_UNCHECKED) from None
    if args.json:
        print(json.dumps(cert.to_dict(), indent=2))
    else:
        print(cert.format_text())
    return EXIT_OK if cert.certified else EXIT_FINDING
