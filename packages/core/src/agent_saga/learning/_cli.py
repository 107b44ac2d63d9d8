"""``agent-saga corpus``: a log's steps as training data, each labelled by whether the world kept it."""

from __future__ import annotations

import argparse
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, CliError
from agent_saga.cli.options import add_log_option, add_verb, log_target

__all__ = ["register", "run_corpus"]

_FORMATS = ("jsonl", "parquet")


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "corpus", run_corpus,
        about=(
            "One example per executed step of the log, labelled by its fate: KEPT, UNDONE, COLLATERAL "
            "(a call that worked, rolled back because a later step failed) or UNKNOWN. With --pairs, "
            "DPO preference pairs (prompt, chosen, rejected) within one tool and comparable contexts. "
            "A log whose hash chain does not verify is refused (exit 1): check it with 'agent-saga verify'."
        ),
        examples=(
            "examples:\n  agent-saga corpus --wal ./agent-saga.wal --out corpus.jsonl\n"
            "  agent-saga corpus --wal ./agent-saga.wal --out pairs.jsonl --pairs\n"
            "  agent-saga corpus --wal ./agent-saga.wal --out corpus.parquet   # needs agent-saga[corpus]"
        ),
    )
    add_log_option(p, "the log to read")
    p.add_argument("--out", metavar="FILE", required=True,
                   help="where to write: .parquet writes Parquet (the corpus extra), anything else JSON Lines")
    p.add_argument("--pairs", action="store_true", help="write preference pairs instead of examples")


def run_corpus(args: argparse.Namespace) -> int:
    from agent_saga.cli.logfile import read_log
    from agent_saga.inert import inert
    from agent_saga.learning import build_corpus
    from agent_saga.log.chain import verify_records

    path = log_target(args)
    records = read_log(path)
    verdict = verify_records(records)
    if not verdict.ok:
        print(inert(f"{path}: the log does not verify ({verdict.label}); no corpus written from it"))
        return EXIT_FINDING
    corpus = build_corpus(records)
    if str(args.out).endswith(".parquet"):
        try:
            written = corpus.to_parquet(args.out, pairs=args.pairs)
        except ImportError as err:
            raise CliError(str(err)) from None
    else:
        written = corpus.to_jsonl(args.out, pairs=args.pairs)
    what = "preference pair(s)" if args.pairs else "example(s)"
    counts = ", ".join(f"{n} {label}" for label, n in corpus.counts().items())
    print(inert(f"wrote {written} {what} to {args.out} ({counts}; {corpus.skipped} step(s) naming no tool skipped)"))
    return EXIT_OK
