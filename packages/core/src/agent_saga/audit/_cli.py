"""``agent-saga verify | export | certify``: check a log, bundle it, certify it.

Each verifies the chain first (streaming, see ``agent_saga.log.chain``); export
and certify refuse a chain that does not verify unless told otherwise
(``--allow-broken``, ``--allow-unverified``). A server log's URL is read through a
private snapshot of its records (``cli.options.readable_log``).

Exit codes (as for every verb): 0 ok; 1 a finding (a chain that does not verify,
an unaccounted effect); 2 usage (an empty ``--wal-path``); 3 could not check
(missing or unreadable file, a FIFO or directory, an encrypted log without its key).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import (
    add_json_option,
    add_log_option,
    add_verb,
    given_log,
    read_as_file,
    readable_log,
)
from agent_saga.cli.progress import Progress
from agent_saga.inert import inert
from agent_saga.log.chain import ChainUnverified
from agent_saga.log.fixture import SyntheticLog
from agent_saga.log.fs import NotARegularFile
from agent_saga.log.resolve import is_url

__all__ = ["register", "run_certify", "run_export", "run_verify"]


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "verify", run_verify,
        about=(
            "Check every record's digest, hash, prev link and sequence, and name the first record "
            "that does not add up, reading one line at a time. A log written with chain=False is "
            "reported as unchained, and a plain line inside a chained log as a break (exit 1)."
        ),
        examples=(
            "example:\n  agent-saga verify --wal-path ./agent-saga.wal\n"
            "  agent-saga verify --wal-path ./agent-saga.wal --expect-head <hash from a manifest>\n\n"
            "exit codes: 0 intact or empty, 1 broken/unchained/partial, 2 usage, 3 could not read the log\n"
        ),
    )
    add_log_option(p)
    p.add_argument("--expect-head", metavar="HASH", help="a chain head recorded earlier that the log must still contain")
    add_json_option(p)

    p = add_verb(
        verbs, "export", run_export,
        about=(
            "Verify the log, then copy it verbatim into a new directory with a manifest (chain head, "
            "SHA-256, the verification rule in prose) and a SHA256SUMS file an auditor checks with "
            "sha256sum -c. A chain that does not verify is refused unless --allow-broken."
        ),
        examples=(
            "example:\n  agent-saga export --wal-path ./agent-saga.wal --out ./audit-2026-07\n"
            "  (cd ./audit-2026-07 && sha256sum -c SHA256SUMS)\n\n"
            "exit codes: 0 exported, 1 the chain does not verify (refused, or exported labelled with\n"
            "--allow-broken),\n"
            "2 usage, 3 could not read the log or write the bundle\n"
        ),
    )
    add_log_option(p)
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory for the bundle")
    p.add_argument("--allow-broken", action="store_true",
                   help="export a log whose chain does not verify (broken, unchained, partial), labelled so")
    p.add_argument("--synthetic-ok", action="store_true",
                   help="export a log made by `agent-saga synthesize` as a test fixture, labelled so")

    p = add_verb(
        verbs, "certify", run_certify,
        about=(
            "Verify the log's chain, then name every committed effect (COMPENSABLE or IRREVERSIBLE step, "
            "or an UNKNOWN outcome) that no record accounts for. Non-zero exit fails a CI gate."
        ),
        examples=(
            "example:\n  agent-saga certify --wal-path ./agent-saga.wal\n"
            "  AGENT_SAGA_WAL_KEY=... agent-saga certify --wal-path ./encrypted.wal --json\n\n"
            "exit codes: 0 certified, 1 an effect is unaccounted for (or the chain does not verify),\n"
            "2 usage, 3 could not read the log (missing, unreadable, or encrypted without a key)\n"
        ),
    )
    add_log_option(p)
    add_json_option(p, "the certificate")
    p.add_argument("--allow-unverified", action="store_true",
                   help="certify a log whose chain does not verify; a broken chain is still never certified")
    p.add_argument("--synthetic-ok", action="store_true",
                   help="certify a log made by `agent-saga synthesize` as a test fixture, labelled so")


def _check_path(args: argparse.Namespace) -> None:
    args.wal_path = given_log(args)
    if not args.wal_path.strip():
        raise CliError("--wal-path is empty: give the log file's path (or set $AGENT_SAGA_WAL)", EXIT_USAGE)


def _unreadable(path: str, err: OSError) -> CliError:
    if isinstance(err, FileNotFoundError):
        return CliError(f"cannot read {path}: no such file (pass --wal-path, or set $AGENT_SAGA_WAL){read_as_file(path)}",
                        EXIT_UNCHECKED)
    if isinstance(err, NotARegularFile):
        return CliError(str(err), EXIT_UNCHECKED)
    return CliError(f"cannot read {path}: {err.strerror or err}", EXIT_UNCHECKED)


def _refused(path: str, err: ChainUnverified | SyntheticLog, what: str, override: str) -> CliError:
    """The library's refusal of a log whose chain does not verify (``override``: the command's flag
    that allows it) or that is synthetic, with the command's own flags in place of the Python arguments."""
    where = path if is_url(path) else Path(path).absolute()
    if isinstance(err, SyntheticLog):
        return CliError(str(SyntheticLog(where, err.synthetic, err.records, what,
                                         "rerun with --synthetic-ok to treat it as a test fixture")), EXIT_FINDING)
    return CliError(str(ChainUnverified.refusing(where, err.report, what, override)), EXIT_FINDING)


def run_verify(args: argparse.Namespace) -> int:
    from agent_saga.audit import verify_log

    _check_path(args)
    try:
        with readable_log(args.wal_path) as path, Progress("verifying", megabytes=True) as progress:
            report = verify_log(path, expect_head=args.expect_head, progress=progress)
    except OSError as err:
        raise _unreadable(args.wal_path, err) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"{args.wal_path}")
        print(report.format_text())
        if report.status == "broken":
            print(f"FIRST BAD RECORD: {report.first_bad}: {inert(report.reason)}")
    return EXIT_OK if report.ok else EXIT_FINDING


def run_export(args: argparse.Namespace) -> int:
    from agent_saga.audit import export_bundle

    _check_path(args)
    log = Path(args.wal_path)
    try:
        with readable_log(args.wal_path) as log, Progress("verifying", megabytes=True) as progress:
            result = export_bundle(log, args.out, allow_broken=args.allow_broken, progress=progress,
                                   source=args.wal_path if is_url(args.wal_path) else None,
                                   synthetic_ok=args.synthetic_ok)
    except (ChainUnverified, SyntheticLog) as err:
        raise _refused(args.wal_path, err, "export it as evidence",
                       "rerun with --allow-broken to export it labelled with this verdict") from None
    except FileExistsError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None
    except OSError as err:
        if err.filename is not None and str(err.filename) not in (str(log.absolute()), str(log)):
            raise CliError(f"cannot write the bundle at {err.filename}: {err.strerror}", EXIT_UNCHECKED) from None
        raise _unreadable(args.wal_path, err) from None
    m = result.manifest
    if m["record_count"]:
        print(f"exported {m['record_count']} records (seq {m['first_seq']}..{m['last_seq']}) to {result.out_dir}")
    else:
        print(f"exported 0 records (empty log) to {result.out_dir}")
    print(f"chain: {m['chain']}")
    if m["synthetic_records"]:
        print(m["notes"][-1])
    if m["chain_head"]:
        print(f"head: {m['chain_head']}")
    print(f"records.jsonl sha256: {m['records_sha256']}")
    print(f"check it anywhere with: (cd {result.out_dir} && sha256sum -c SHA256SUMS)")
    return EXIT_OK if result.report.ok else EXIT_FINDING


def run_certify(args: argparse.Namespace) -> int:
    from agent_saga.audit import certify_log
    from agent_saga.log.crypto import EncryptionError

    _check_path(args)
    try:
        with readable_log(args.wal_path) as log:
            cert = certify_log(log, allow_unverified=args.allow_unverified, synthetic_ok=args.synthetic_ok)
    except (ChainUnverified, SyntheticLog) as err:
        raise _refused(args.wal_path, err, "certify it",
                       "rerun with --allow-unverified to list its effects anyway (never certified over a broken chain)") from None
    except OSError as err:
        raise _unreadable(args.wal_path, err) from None
    except (EncryptionError, ImportError) as err:
        raise CliError(f"cannot read {args.wal_path}: {err}", EXIT_UNCHECKED) from None
    if args.json:
        print(json.dumps(cert.to_dict(), indent=2))
    else:
        print(cert.format_text())
    return EXIT_OK if cert.certified else EXIT_FINDING
