"""``agent-saga mesh merge``: merge the logs devices wrote apart into one log every verb reads."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_UNCHECKED, CliError
from agent_saga.cli.options import add_group, add_json_option, add_verb

__all__ = ["register", "run_enrol", "run_merge", "run_sign"]

_EXIT_CODES = (
    "exit codes: 0 merged, nothing left out; 1 merged and written, but records were left out (each named: "
    "device, seq, input, why: one that does not verify, a torn final write, or one no trusted device key "
    "vouches for) or two devices' steps of one saga share an idempotency key (listed); 2 usage; "
    "3 an input could not be used at all (nothing written)"
)


def register(verbs: Any) -> None:
    sub = add_group(
        verbs, "mesh", "mesh_verb",
        about="Offline mesh sagas: each device keeps its own log; merge them, in any order, any number of times.",
        examples="example:\n  agent-saga mesh merge phone.wal laptop.wal --out merged.wal",
    )
    m = add_verb(
        sub, "merge", run_merge, help="merge device logs (or merged logs) into one log",
        about=(
            "Merge device logs into one chained log: any order, grouping and repetition of the same logs gives "
            "the same bytes. Each device's chain is verified; a record that does not verify is named with "
            "everything after it on that device's chain, and left out."
        ),
        examples=_EXIT_CODES + "\nexample:\n  agent-saga mesh merge phone.wal laptop.wal --out merged.wal",
    )
    m.add_argument("logs", nargs="+", metavar="LOG", help="a device's log file, or a merged log")
    m.add_argument("--out", required=True, metavar="FILE", help="the merged log to write (replaced atomically)")
    add_json_option(m, "the result")
    m.add_argument("--device-keys", metavar="FILE",
                   help="the trusted device keys (default: the host's list, /etc/agent-saga/device-keys)")
    m.add_argument("--allow-unsigned", action="store_true",
                   help="take the logs of devices with no key (written before device keys) as claims")
    for verb, run, text in (
        ("enrol", run_enrol, "start a device's log with its key (the log's first record names it)"),
        ("sign", run_sign, "sign the device's head with its key: a hub merges nothing after the last signed head"),
    ):
        v = add_verb(
            sub, verb, run, help=text,
            about=text[0].upper() + text[1:] + ".",
            examples=(
                "example:\n  agent-saga approvals keygen --approver phone-1 --key phone.key\n"
                f"  agent-saga mesh {verb} phone.wal --key phone.key"
            ),
        )
        v.add_argument("log", metavar="LOG", help="the device's own log")
        v.add_argument("--key", required=True, metavar="FILE", help="the device's private key file")


def run_merge(args: argparse.Namespace) -> int:
    from agent_saga.mesh import MeshError, merge

    try:
        result = merge(args.logs, device_keys=args.device_keys, allow_unsigned=args.allow_unsigned)
    except MeshError as err:
        raise CliError(f"{err}; nothing was written", EXIT_UNCHECKED) from None
    result.write(args.out)
    if args.json:
        print(json.dumps({**result.to_dict(), "out": args.out}, sort_keys=True))
    else:
        print(result.format_text())
        print(f"wrote {args.out}")
    return EXIT_OK if result.ok else EXIT_FINDING


def run_enrol(args: argparse.Namespace) -> int:
    from agent_saga.log.attestation import OperatorKey
    from agent_saga.mesh import MeshError, device_keys_path, enrol

    try:
        device = enrol(args.log, args.key)
    except MeshError as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None
    public = OperatorKey.load(args.key).public
    print(f"enrolled device {device[:16]} in {args.log}; on the hub, as root: "
          f"agent-saga approvals trust '{public}' --trusted-keys {device_keys_path()}")
    return EXIT_OK


def run_sign(args: argparse.Namespace) -> int:
    from agent_saga.log.maintenance import LogMaintenanceError
    from agent_saga.mesh import MeshError, sign_head

    try:
        seq, head = sign_head(args.log, args.key)
    except (MeshError, LogMaintenanceError) as err:
        raise CliError(str(err), EXIT_UNCHECKED) from None
    print(f"signed the head of {args.log}: seq {seq}, hash {head[:16]}")
    return EXIT_OK
