"""What a retried step pays to find its signed decision, with the file store and with Redis.

    python bench/bench_approvals.py [--redis URL] [--runs N]

For each store: N requests are made and approved through ``decide`` with a
trusted signing key; the gateway sees each decision once (writing the records),
then the same request is asked again -- a retried step -- and that second ask is
timed: one store read, the trusted-key list read, the signature checked, no
record written, nobody notified. Prints the median in milliseconds. Everything
(host root, keys, stores, logs) lives in a temporary directory.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agent_saga import ApprovalGateway, ApprovalPolicy, FileApprovalStore, FileWAL
from agent_saga.approvals import ConsoleNotifier, RedisApprovalStore, SigningKey, decide, trust_key
from agent_saga.approvals._entry import new_entry
from agent_saga.engine.ports import StepRequest
from agent_saga.gate import ApprovalRequest
from agent_saga.gate.host import HOST_ROOT_ENV
from agent_saga.semantics import ActionSemantics


def retried_ms(store: Any, wal: FileWAL, key: SigningKey, runs: int) -> float:
    gateway = ApprovalGateway(store=store, notifier=ConsoleNotifier(io.StringIO()), wal=wal,
                              policy=ApprovalPolicy(timeout=600))
    samples = []
    for i in range(runs):
        step = StepRequest(f"saga-{i}", 1, "wire.send", ActionSemantics.IRREVERSIBLE, {"amount": 80_000})
        request = ApprovalRequest(step, "irreversible", "cannot be undone")
        entry = new_entry(request, time.time(), 600, ((("@oncall",), 0.0),))
        store.create(entry.replace(escalated=(0,), notified=(0,)))
        decide(store, entry.id, "approve", approver="risk@corp", key=key)
        assert gateway.request_approval(request).approved  # first sight: records written
        start = time.perf_counter()
        assert gateway.request_approval(request).approved
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6399/0"))
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[HOST_ROOT_ENV] = str(Path(tmp) / "host")  # trust the bench's key there, not on the host
        key = SigningKey.generate("risk@corp")
        trust_key(key.public)
        wal = FileWAL(Path(tmp) / "bench.wal")
        print(f"file store:  {retried_ms(FileApprovalStore(Path(tmp) / 'approvals'), wal, key, args.runs):.2f} ms")
        redis = RedisApprovalStore(args.redis, prefix=f"agent-saga:bench:{uuid.uuid4().hex}")
        try:
            print(f"Redis store: {retried_ms(redis, wal, key, args.runs):.2f} ms")
        finally:
            keys = list(redis.client.scan_iter(f"{redis.prefix}:*"))
            if keys:
                redis.client.delete(*keys)
            redis.client.close()
        wal.close()


if __name__ == "__main__":
    main()
