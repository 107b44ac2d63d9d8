"""The recovery daemon under synthetic load: one sweep over N synthetic sagas.

    python bench/bench_synthetic_recovery.py [--sagas 50000] [--real 60] [--seed 7] [--dir DIR] [--json]

Real sagas first (``--real`` of them, on a FileWAL): most complete, some roll back
after a failing step, some crash (the saga is started, a step commits with a
registered undo, and no end record is ever written). ``WALProfile.fit`` learns that
log; ``synthesize`` draws ``--sagas`` sagas from it into a new log; then one
``RecoveryDaemon.sweep()`` (with its clock past every lease) recovers every crashed
saga in it: it runs the registered undo with the synthetic kwargs, or escalates.

Reported: the time (wall and process CPU) to fit, to synthesize, to write the log and
to sweep it, and the sweep's rate in sagas of the log per second and in crashed
sagas recovered per second. The log is re-verified after the sweep.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_saga import Compensation, FileWAL, NotApplied, Saga, SagaAborted, compensator, saga_scope
from agent_saga.engine.ports import lifecycles
from agent_saga.log import read_records
from agent_saga.log.chain import verify_file
from agent_saga.recovery import RecoveryDaemon
from agent_saga.synthetic import WALProfile, synthesize

REFUND = "bench.synthetic.refund"
ENDS = {"SAGA_COMPLETED", "SAGA_ROLLED_BACK"}


@compensator(REFUND)
def refund(charge: str, cents: int) -> None:
    """The undo the daemon runs from the log."""


def _undo(result: Any) -> Compensation:
    return Compensation(fn=refund, handler=REFUND, kwargs={"charge": str(result), "cents": 1250})


def write_real_log(path: Path, sagas: int, seed: int) -> None:
    """``sagas`` real sagas: 70% complete, 20% roll back on a refused step, 10% crash."""
    rng = random.Random(seed)
    wal = FileWAL(path, linger=0.001)
    try:
        for n in range(sagas):
            fate = n % 10
            args = {"amount": rng.randint(100, 99_999), "currency": "EUR", "customer": f"cus_{rng.getrandbits(40):x}"}
            if fate == 9:  # a crash: started, one undoable step committed, never ended
                s = Saga(wal, name="checkout")
                s.start()
                s.execute_sync(tool="stripe.charge", semantics="COMPENSABLE", args=args,
                               forward=lambda: "ch_live", compensate=_undo)
                wal.barrier()
                for hook in lifecycles():  # its lease is no longer renewed, as when the process dies
                    hook.ended(s.saga_id, wal, None)
                continue
            try:
                with saga_scope(wal, name="checkout") as scope:
                    scope.execute(tool="stripe.charge", semantics="COMPENSABLE", args=args,
                                  forward=lambda: "ch_live", compensate=_undo)
                    if fate >= 7:
                        def refused() -> None:
                            raise NotApplied("address rejected")

                        scope.execute(tool="ship.create", semantics="COMPENSABLE", args={"zip": "10115"},
                                      forward=refused, compensate=_undo)
                    else:
                        scope.execute(tool="mail.send", semantics="IRREVERSIBLE", args={"to": "a@b.c"},
                                      forward=lambda: "sent")
            except SagaAborted:
                pass
    finally:
        wal.close()


def run(sagas: int, real: int, seed: int, directory: Path) -> dict[str, Any]:
    real_log = directory / "real.wal"
    write_real_log(real_log, real, seed)

    def timed(fn: Any) -> tuple[Any, float, float]:
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        return out, time.perf_counter() - w, time.process_time() - c

    profile, fit_s, _ = timed(lambda: WALProfile.fit(read_records(real_log)))
    log = directory / "synthetic.wal"

    def make() -> tuple[float, float, int]:
        # In a function of its own: the records are freed before the sweep.
        records, synth_s, _ = timed(lambda: synthesize(profile, sagas=sagas, seed=seed))
        _, write_s, _ = timed(lambda: records.write(log))
        return synth_s, write_s, len(_open(records))

    synth_s, write_s, open_sagas = make()
    daemon = RecoveryDaemon(log, clock=lambda: 4_000_000_000.0, name="bench")
    try:
        report, sweep_s, sweep_cpu = timed(daemon.sweep)
    finally:
        daemon.close()
    verdict = verify_file(log)
    return {
        "sagas": sagas, "records": verdict.records, "profile_bytes": len(profile.to_json()),
        "fit_s": round(fit_s, 3), "synthesize_s": round(synth_s, 3), "write_s": round(write_s, 3),
        "open_sagas": open_sagas, "swept_open": report.open_sagas, "recovered": len(report.recovered),
        "held": len(report.held), "compensated": report.compensated,
        "new_escalations": len(report.new_escalations),
        "sweep_s": round(sweep_s, 3), "sweep_cpu_s": round(sweep_cpu, 3),
        "sagas_per_s": round(sagas / sweep_s, 1) if sweep_s else None,
        "recovered_per_s": round(len(report.recovered) / sweep_s, 1) if sweep_s else None,
        "chain_after": verdict.status,
    }


def _open(records: list[dict[str, Any]]) -> set[str]:
    ended = {r["saga"] for r in records if r["type"] in ENDS}
    return {r["saga"] for r in records} - ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sagas", type=int, default=50_000)
    parser.add_argument("--real", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: a temporary dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        result = run(args.sagas, args.real, args.seed, directory)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:18} {v}")
    return 0 if result["chain_after"] == "intact" and result["swept_open"] == result["open_sagas"] else 1


if __name__ == "__main__":
    sys.exit(main())
