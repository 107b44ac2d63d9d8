"""certify: every committed effect accounted for, on logs the real engine wrote."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent_saga import ActionSemantics, Compensation, FileWAL, SagaAborted, saga_scope
from agent_saga.audit import certify, certify_log
from agent_saga.log import compact, read_records, redact_where
from agent_saga.log.chain import ChainUnverified

C, IRR, R = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE, ActionSemantics.REVERSIBLE


def fine(r: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def broken_undo(r: Any) -> Compensation:
    def fail() -> None:
        raise ConnectionError("refund API down")

    return Compensation(fn=fail, description="refund")


def boom() -> None:
    raise RuntimeError("the model gave up")


def test_completed_and_cleanly_rolled_back_sagas_are_certified(wal: FileWAL) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch_1"}, compensate=fine)
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")  # kept: the saga completed
        s.execute(tool="cache.put", semantics=R, forward=lambda: None)
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch_2"}, compensate=fine)
        s.execute(tool="k8s.create", semantics=C, forward=lambda: {"ns": "x"}, compensate=fine)
        boom()
    wal.barrier()
    cert = certify(read_records(wal.path))
    assert cert.certified
    assert bool(cert)
    assert (cert.sagas, cert.effects, cert.accounted) == (2, 4, 4)
    assert cert.format_text().startswith("CERTIFIED: 4 of 4")


def test_an_orphaned_irreversible_effect_is_named(wal: FileWAL) -> None:
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        saga_id = s.saga_id
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: {"id": "ch"}, compensate=fine)
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")
        boom()
    wal.barrier()
    cert = certify(read_records(wal.path))
    assert not cert.certified
    (u,) = cert.unaccounted
    assert (u.saga, u.step, u.tool, u.semantics, u.state) == (saga_id, 2, "mail.send", "IRREVERSIBLE", "committed")
    assert "orphaned" in u.why
    assert f"saga {saga_id} step 2 mail.send [IRREVERSIBLE]" in cert.format_text()


def test_a_failed_compensation_and_the_steps_it_stranded_are_named(wal: FileWAL) -> None:
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="db.insert", semantics=C, forward=lambda: 1, compensate=fine)
        s.execute(tool="stripe.charge", semantics=C, forward=lambda: 2, compensate=broken_undo)
        boom()
    wal.barrier()
    cert = certify(read_records(wal.path))
    whys = {u.tool: u.why for u in cert.unaccounted}
    assert set(whys) == {"stripe.charge", "db.insert"}
    assert "compensation failed" in whys["stripe.charge"]
    assert "refund API down" in whys["stripe.charge"]
    assert "unresolved" in whys["db.insert"]  # halted before it was attempted


def test_an_unknown_outcome_rescued_by_a_fallback_is_not_certified(wal: FileWAL) -> None:
    def timed_out() -> None:
        raise TimeoutError("no answer from the card network")

    with saga_scope(wal) as s:
        s.execute(tool="stripe.charge", semantics=C, forward=timed_out, compensate=fine,
                  fallback_action=lambda: {"id": "ch_retry"})
    wal.barrier()
    cert = certify(read_records(wal.path))
    (u,) = cert.unaccounted
    assert (u.step, u.state) == (1, "unknown")
    assert "UNKNOWN" in u.why
    assert cert.effects == 2
    assert cert.accounted == 1


CRASH = textwrap.dedent("""
    import os, sys
    from agent_saga import ActionSemantics, Compensation, FileWAL, saga_scope
    wal = FileWAL(sys.argv[1])
    scope = saga_scope(wal)
    s = scope.__enter__()
    s.execute(tool="aws.run_instances", semantics=ActionSemantics.COMPENSABLE,
              forward=lambda: {"id": "i-1"},
              compensate=lambda r: Compensation(fn=lambda: None, description="terminate"))
    wal.barrier()
    print(s.saga_id, flush=True)
    os._exit(1)  # killed between steps, no end record
""")


@pytest.mark.slow
def test_a_saga_killed_mid_flight_is_not_certified(wal_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASH, str(wal_path)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    saga_id = proc.stdout.strip()
    cert = certify_log(wal_path)
    assert not cert.certified
    assert cert.chain == "intact"
    (u,) = cert.unaccounted
    assert (u.saga, u.step, u.tool) == (saga_id, 1, "aws.run_instances")
    assert "no end record" in u.why


def leave_open(wal: FileWAL) -> str:
    """Run one step of a saga that never ends, in a context of its own (nothing leaks)."""

    def run() -> str:
        s = saga_scope(wal).__enter__()
        s.execute(tool="db.insert", semantics=C, forward=lambda: 1, compensate=fine)
        return s.saga_id

    saga_id = contextvars.copy_context().run(run)
    wal.barrier()
    return saga_id


def test_redacted_semantics_count_as_an_effect(wal: FileWAL, operator_key: Path) -> None:
    leave_open(wal)
    redact_where(wal.path, lambda r: r["type"] in ("STEP_INTENT", "STEP_COMMITTED"), by="dpo", reason="erasure",
                 signer=operator_key)
    cert = certify_log(wal.path)
    (u,) = cert.unaccounted
    assert u.tool is None
    assert "<tool unknown" in u.format_text()
    assert cert.chain == "intact"


def test_a_broken_chain_voids_the_certificate(wal: FileWAL) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="db.insert", semantics=C, forward=lambda: 1, compensate=fine)
    wal.close()
    text = wal.path.read_text()
    wal.path.write_text(text.replace('"type":"SAGA_STARTED"', '"type":"SAGA_STARTEX"', 1))
    with pytest.raises(ChainUnverified, match=r"broken at seq 1 \(line 1\).*allow_unverified=True"):
        certify_log(wal.path)
    cert = certify_log(wal.path, allow_unverified=True)
    assert not cert.certified
    assert cert.chain.startswith("BROKEN at seq 1")
    assert any("no certificate is possible" in n for n in cert.notes)


def test_compaction_keeps_what_certify_needs(wal: FileWAL, operator_key: Path) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="db.insert", semantics=C, forward=lambda: 1, compensate=fine)
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="mail.send", semantics=IRR, forward=lambda: "sent")
        boom()
    wal.barrier()
    before = certify_log(wal.path)
    compact(wal.path, signer=operator_key)
    after = certify_log(wal.path)
    assert before.unaccounted == after.unaccounted
    assert len(after.unaccounted) == 1
    assert after.sagas == 1  # the completed saga was compacted away


def test_an_unprotected_call_is_never_certified() -> None:
    from agent_saga import MemoryWAL, saga_scope
    from agent_saga.audit import certify

    wal = MemoryWAL()
    with saga_scope(wal) as s:
        s.saga.note_unprotected("send_email", {"to": "x@example.com"}, origin="langgraph")
    cert = certify(wal.records())
    assert not cert.certified
    assert [(u.tool, u.state) for u in cert.unaccounted] == [("send_email", "unprotected")]
    assert "call send_email" in cert.format_text()
