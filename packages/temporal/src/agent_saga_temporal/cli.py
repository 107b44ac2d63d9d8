"""``agent-saga-temporal``: check a manifest, print its schema, resolve or export a job, run the demo.

Exit codes as the core's ``agent-saga``: 0 ok; 1 a finding (an invalid manifest);
2 a usage error (or a resolution the job refused); 3 could not check (no server,
unreadable file, no such job); 141 the reader of the output went away
(``agent-saga-temporal schema | head``), as a shell reports SIGPIPE, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_UNCHECKED = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-saga-temporal", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)

    check = verbs.add_parser("check", help="validate a saga.yaml; every problem is named with its line")
    check.add_argument("manifest", help="path to the saga.yaml")

    verbs.add_parser("schema", help="print the JSON Schema of saga.yaml")

    def server(p: argparse.ArgumentParser) -> None:
        p.add_argument("--address", default=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                       help="the Temporal frontend (default: $TEMPORAL_ADDRESS, else %(default)s)")
        p.add_argument("--namespace", default="default")
        p.add_argument("--workflow-id", required=True, help="the job's workflow id (its saga id)")

    resolve = verbs.add_parser("resolve", help="decide for a job that waits for a person")
    server(resolve)
    resolve.add_argument("--decision", choices=("accept", "retry"), required=True,
                         help="accept: what stands is handled (ends resolved_by_person); retry: run the unproven undo again")
    resolve.add_argument("--by", required=True, help="who decides (recorded in the history)")
    resolve.add_argument("--note", default="", help="why, for the record")
    resolve.add_argument("--no-wait", action="store_true",
                         help="send a signal and return at once (the job records a resolution it cannot use)")

    export = verbs.add_parser("export", help="write a job's history to a hash-chained agent-saga log")
    server(export)
    export.add_argument("--wal-path", required=True, help="the log to append to (created if missing)")

    demo = verbs.add_parser(
        "demo", help="run a checkout scenario, export it, and replay it in the flight recorder",
        description=("Run the checkout example's scenario (on $TEMPORAL_ADDRESS, else a local dev server), "
                     "export its history to a hash-chained log, and serve the flight recorder on 127.0.0.1 "
                     "with the URL that opens this run and watches it from the start. Ctrl+C stops it."),
    )
    demo.add_argument("--scenario", default="lost-response",
                      help="happy, business-failure, lost-response or refund-fails (default: %(default)s)")
    demo.add_argument("--open", action="store_true", help="open the URL in a browser (printed either way)")
    demo.add_argument("--wal-path", help="the log to export to (default: demo.wal in $AGENT_SAGA_TEMPORAL_STATE, "
                                         "else ./agent-saga-temporal-demo)")
    demo.add_argument("--port", type=int, default=0, help="the flight recorder's port (default: any free one)")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.verb == "schema":
        from agent_saga_temporal.manifest import schema

        print(json.dumps(schema(), indent=2))
        return EXIT_OK
    if args.verb == "check":
        from agent_saga_temporal.manifest import ManifestError, load_manifest

        try:
            job = load_manifest(args.manifest)
        except ManifestError as err:
            for problem in err.problems:
                print(problem, file=sys.stderr)
            return EXIT_UNCHECKED if not os.path.isfile(args.manifest) else EXIT_FINDING
        print(f"{args.manifest}: ok: job {job.name!r}, {len(job.steps)} steps, {len(job.invariants)} invariants")
        return EXIT_OK
    if args.verb == "demo":
        return _demo(args)
    code = asyncio.run(_remote(args))
    # The SDK's native runtime can abort the interpreter's shutdown after a refused
    # connection (SIGABRT in about 1 run of 5 here). Everything this command wrote is
    # closed and flushed by now, so leave without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _remote(args: argparse.Namespace) -> int:
    from temporalio.client import Client, WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from agent_saga_temporal.export import ExportError, export_job
    from agent_saga_temporal.jobs import resolve

    try:
        client = await Client.connect(args.address, namespace=args.namespace)
    except Exception as err:  # noqa: BLE001 - any connection failure is "could not check"
        print(f"error: cannot reach Temporal at {args.address}: {err}", file=sys.stderr)
        return EXIT_UNCHECKED
    if args.verb == "resolve":
        try:
            status = await resolve(client, args.workflow_id, decision=args.decision, by=args.by, note=args.note,
                                   wait=not args.no_wait)
        except WorkflowUpdateFailedError as err:
            print(f"error: the job refused the resolution: {err.cause or err}", file=sys.stderr)
            return EXIT_USAGE
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        except RPCError as err:  # no such job, or it has ended
            print(f"error: cannot resolve {args.workflow_id}: {err.message}", file=sys.stderr)
            return EXIT_USAGE
        print(f"{args.workflow_id}: {status}")
        return EXIT_OK
    try:
        exported = await export_job(client, args.workflow_id, args.wal_path)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNCHECKED
    print(f"{exported.path}: {exported.records} records of saga {exported.saga_id} ({exported.status})")
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agent_saga_temporal.demo import run_demo
    from agent_saga_temporal.devserver import DevServerError
    from agent_saga_temporal.examples.ecommerce.run import SCENARIOS
    from agent_saga_temporal.export import ExportError

    if args.scenario not in SCENARIOS:
        print(f"error: unknown scenario {args.scenario!r}: choose one of {', '.join(SCENARIOS)}", file=sys.stderr)
        return EXIT_USAGE
    if not 0 <= args.port <= 65535:
        print(f"error: --port {args.port} is not a port number (0..65535)", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = run_demo(args.scenario, wal_path=Path(args.wal_path) if args.wal_path else None, port=args.port,
                        open_browser=args.open, out=lambda line: print(line, flush=True))
    except (DevServerError, ExportError, OSError, RuntimeError) as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        code = EXIT_UNCHECKED
    # As for the remote verbs: leave without the teardown the SDK's native runtime can abort.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    from agent_saga.cli.main import quiet_broken_pipe

    try:
        try:
            code = _run(_parser().parse_args(argv))
        except SystemExit:  # --help, a usage error: argparse printed, and exits
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # here, so that a reader gone away (`| head`) is caught below
    except BrokenPipeError:
        return quiet_broken_pipe()
    return code

