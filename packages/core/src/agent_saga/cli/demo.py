"""``agent-saga demo``: watch a transaction unwind, on the real engine, offline."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["register", "run_demo"]


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "demo",
        help="run a short demonstration on the real engine (no network, no keys)",
        description="Run a multi-step transaction across simulated systems that fails and unwinds.",
        epilog="example: agent-saga demo --no-color",
    )
    p.add_argument("--dir", default="agent-saga-demo", help="where the demo writes its log (default: %(default)s)")
    p.add_argument("--no-color", action="store_true", help="plain text output")
    p.add_argument("--logs", action="store_true", help="also show the engine's own trace")
    p.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    import logging

    from agent_saga import ActionSemantics, Compensation, FileWAL, SagaAborted, compensator, saga_scope

    if args.logs:
        logging.basicConfig(level=logging.DEBUG, format="  [engine] %(name)s: %(message)s")
    color = not (args.no_color or os.environ.get("NO_COLOR") or not sys.stdout.isatty())

    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    wal_path = directory / "demo.wal"
    world: dict[str, list[str]] = {"instances": [], "namespaces": [], "tickets": []}

    @compensator("demo.terminate_instance")
    def terminate(instance_id: str, idempotency_key: str | None = None) -> None:
        world["instances"].remove(instance_id)
        print(paint(f"    <- terminated instance {instance_id}", "33"))

    @compensator("demo.delete_namespace")
    def drop(namespace: str, idempotency_key: str | None = None) -> None:
        world["namespaces"].remove(namespace)
        print(paint(f"    <- dropped namespace {namespace}", "33"))

    @compensator("demo.close_ticket")
    def close(ticket: str, idempotency_key: str | None = None) -> None:
        world["tickets"].remove(ticket)
        print(paint(f"    <- closed ticket {ticket}", "33"))

    def run_instance() -> dict[str, str]:
        world["instances"].append("i-0abc")
        print("    -> started instance i-0abc")
        return {"InstanceId": "i-0abc"}

    def create_ns() -> dict[str, str]:
        world["namespaces"].append("acme")
        print("    -> created namespace acme")
        return {"namespace": "acme"}

    def open_ticket() -> dict[str, str]:
        world["tickets"].append("ONB-7")
        print("    -> opened ticket ONB-7")
        return {"key": "ONB-7"}

    def configure_region() -> None:
        raise ValueError("region 'eu-cantral-1' does not exist (the model made it up)")

    print(paint("Act I - a transaction across three systems fails on step four", "1"))
    wal = FileWAL(wal_path)
    C = ActionSemantics.COMPENSABLE  # noqa: N806 - the seed's spelling
    try:
        with saga_scope(wal, name="onboard-acme") as s:
            s.execute(tool="aws.run_instances", semantics=C, forward=run_instance,
                      compensate=lambda r: Compensation(fn=terminate, handler="demo.terminate_instance",
                                                        kwargs={"instance_id": r["InstanceId"]}))
            s.execute(tool="pinecone.create_namespace", semantics=C, forward=create_ns,
                      compensate=lambda r: Compensation(fn=drop, handler="demo.delete_namespace",
                                                        kwargs={"namespace": r["namespace"]}))
            s.execute(tool="jira.create_issue", semantics=C, forward=open_ticket,
                      compensate=lambda r: Compensation(fn=close, handler="demo.close_ticket",
                                                        kwargs={"ticket": r["key"]}))
            s.execute(tool="aws.configure_region", semantics=ActionSemantics.REVERSIBLE,
                      forward=configure_region)
    except SagaAborted as aborted:
        print(aborted.report.format_text())
    wal.close()
    leftovers = {k: v for k, v in world.items() if v}
    print(f"  world afterwards: {leftovers or 'nothing left behind'}")
    print()
    print(f"The log is at {wal_path}. Next: inspect it with any JSON tool, e.g.")
    print(f"  python -m json.tool --json-lines {wal_path}")
    return 0
