"""An agent process for the cross-process approval tests.

Runs one saga (``--saga``) whose only step is an IRREVERSIBLE ``wire.send`` behind a
PreFlightGate with an ApprovalGateway; the step's effect is a line appended to
``--effects``. Exit 0 when the wire went out, 1 when the gate refused it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from approval_support import gateway, policy

from agent_saga import (
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    StepRefused,
    saga_scope,
)
from agent_saga.approvals import RedisApprovalStore


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--wal", required=True)
    p.add_argument("--saga", required=True)
    p.add_argument("--hook", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()

    store: Any = RedisApprovalStore(a.store) if a.store.startswith("redis://") else FileApprovalStore(a.store)
    wal = FileWAL(a.wal)
    gate = PreFlightGate(approval_provider=gateway(store, a.hook, wal, policy(a.timeout, poll_interval=0.05)))

    def send() -> str:
        with open(a.effects, "a", encoding="utf-8") as out:
            out.write(f"{a.saga} wire 80000 acct_9\n")
        return "sent"

    print("WAITING", flush=True)
    try:
        with saga_scope(wal, gate=gate, saga_id=a.saga) as saga:
            saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=send,
                         args={"amount": 80000, "to": "acct_9"})
    except SagaAborted as err:
        cause = err.__cause__
        print(f"REFUSED {cause}" if isinstance(cause, StepRefused) else f"ABORTED {err}", flush=True)
        return 1
    finally:
        wal.close()
    print("DONE", Path(a.effects).read_text(encoding="utf-8").count("\n"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
