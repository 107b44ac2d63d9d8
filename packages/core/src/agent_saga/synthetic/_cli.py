"""``agent-saga synthesize``: fit a shareable profile of a log, or make a synthetic log from one.

Two steps, one verb: ``--fit LOG --profile-out P`` learns the profile (shapes and
ranges, never a value anyone wrote; see ``agent_saga.synthetic``), and
``--profile P --sagas N --out LOG`` draws a chained synthetic log from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_OK, EXIT_UNCHECKED, EXIT_USAGE, CliError
from agent_saga.cli.options import add_verb
from agent_saga.inert import inert

__all__ = ["register", "run_synthesize"]


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "synthesize", run_synthesize,
        about=(
            "Share a log's shape without its data. --fit reads a log and writes a small JSON profile: "
            "the order of records in each saga, the tool mix, the timing, and each field's shape "
            "(lengths, character classes, magnitudes), never a value anyone wrote. --profile draws "
            "sagas from a profile into a new chained log whose every record is marked __synthetic__ "
            "(certify and export refuse it unless --synthetic-ok)."
        ),
        examples=(
            "examples:\n"
            "  agent-saga synthesize --fit ./agent-saga.wal --profile-out profile.json --redact email account_id\n"
            "  agent-saga synthesize --profile profile.json --sagas 50 --seed 7 --out shareable.wal\n\n"
            "exit codes: 0 written, 2 usage, 3 could not read the log or profile, or write the output\n"
        ),
    )
    p.add_argument("--fit", metavar="LOG", help="the log to profile: a file, or a postgresql:// or redis:// URL")
    p.add_argument("--profile-out", metavar="FILE", help="with --fit: where to write the profile (JSON)")
    p.add_argument("--redact", nargs="+", default=[], metavar="FIELD",
                   help="with --fit: fields whose very shape is dropped (only their presence is kept)")
    p.add_argument("--enum", action="append", default=[], metavar="FIELD=V1,V2",
                   help="with --fit: a field whose values are a fixed vocabulary; those values are kept")
    p.add_argument("--profile", metavar="FILE", help="the profile to draw from")
    p.add_argument("--sagas", type=int, default=50, metavar="N", help="with --profile: how many sagas (default: 50)")
    p.add_argument("--seed", type=int, default=7, help="with --profile: the same seed gives the same log (default: 7)")
    p.add_argument("--out", metavar="LOG", help="with --profile: the new log file to write (must not exist)")


def _enums(given: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in given:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not values:
            raise CliError(f"--enum {item!r}: write it as FIELD=VALUE1,VALUE2 (e.g. currency=USD,EUR)", EXIT_USAGE)
        out.setdefault(name.strip(), []).extend(v for v in values.split(",") if v)
    return out


def run_synthesize(args: argparse.Namespace) -> int:
    from agent_saga.synthetic import ProfileError, WALProfile, synthesize

    if bool(args.fit) == bool(args.profile):
        raise CliError("give either --fit LOG --profile-out FILE (learn a profile) or --profile FILE --out LOG "
                       "(write a synthetic log)", EXIT_USAGE)
    if args.fit:
        if not args.profile_out:
            raise CliError("--fit needs --profile-out FILE: where to write the profile", EXIT_USAGE)
        return _fit(args)
    if not args.out:
        raise CliError("--profile needs --out LOG: the new synthetic log file to write", EXIT_USAGE)
    if args.sagas < 0:
        raise CliError(f"--sagas must be 0 or more, got {args.sagas}", EXIT_USAGE)
    try:
        profile = WALProfile.load(args.profile)
    except OSError as err:
        raise CliError(f"cannot read the profile {args.profile}: {err.strerror or err}", EXIT_UNCHECKED) from None
    except ProfileError as err:
        raise CliError(f"{args.profile}: {err}", EXIT_UNCHECKED) from None
    records = synthesize(profile, sagas=args.sagas, seed=args.seed)
    try:
        records.write(args.out)
    except FileExistsError:
        raise CliError(f"{args.out} already exists: a synthetic log is written to a new file", EXIT_UNCHECKED) from None
    except OSError as err:
        raise CliError(f"cannot write {args.out}: {err.strerror or err}", EXIT_UNCHECKED) from None
    print(f"wrote {len(records)} synthetic record(s) of {args.sagas} saga(s) to {inert(args.out)} (seed {args.seed})")
    print("every record is marked __synthetic__: certify and export refuse it unless --synthetic-ok")
    return EXIT_OK


def _fit(args: argparse.Namespace) -> int:
    from agent_saga.cli.options import readable_log
    from agent_saga.errors import WALError
    from agent_saga.log.file import read_records
    from agent_saga.synthetic import ProfileError, WALProfile

    enums = _enums(args.enum)
    try:
        with readable_log(args.fit) as path:
            profile = WALProfile.fit(read_records(path), redact=args.redact, enums=enums)
    except FileNotFoundError:
        raise CliError(f"cannot read {args.fit}: no such file", EXIT_UNCHECKED) from None
    except OSError as err:
        raise CliError(f"cannot read {args.fit}: {err.strerror or err}", EXIT_UNCHECKED) from None
    except (ProfileError, WALError) as err:
        raise CliError(f"{args.fit}: {err}", EXIT_UNCHECKED) from None
    try:
        Path(args.profile_out).write_text(profile.to_json() + "\n", encoding="utf-8")
    except OSError as err:
        raise CliError(f"cannot write {args.profile_out}: {err.strerror or err}", EXIT_UNCHECKED) from None
    print(inert(profile.format_text()))
    print(f"profile written to {inert(args.profile_out)}")
    return EXIT_OK
