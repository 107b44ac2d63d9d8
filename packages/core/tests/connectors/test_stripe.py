"""The Stripe connector through the real `stripe` SDK, against a local server speaking its API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HERE, subprocess_env
from stripe_server import StripeServer

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.cli.main import main
from agent_saga.connectors.stripe import charge, observe_charge, refund
from agent_saga.credentials import CredentialError
from agent_saga.ids import operation_id
from agent_saga.log.file import read_records
from agent_saga.recovery import fold


def types(log: Path) -> list[str]:
    return [r["type"] for r in read_records(log)]


def test_a_lost_charge_response_then_a_later_failure_leaves_one_charge_refunded_once(
    stripe_server: StripeServer, tmp_path: Path,
) -> None:
    log = tmp_path / "a.wal"
    stripe_server.lose_charges = 1  # the charge lands; its answer is dropped
    with FileWAL(log) as wal, pytest.raises(SagaAborted) as aborted, saga_scope(wal) as s:
        got = charge(4200, "usd", "tok_visa", credential_ref="stripe_test")
        assert got["id"] == "ch_0001" and got["amount"] == 4200  # the provider's own answer
        raise RuntimeError("shipping refused the order")
    assert aborted.value.report.clean
    assert list(stripe_server.charges) == ["ch_0001"]  # exactly one charge
    assert stripe_server.refunds_applied == ["ch_0001"] and len(stripe_server.refund_requests) == 1
    assert stripe_server.charges["ch_0001"]["metadata"] == {"agent_saga_op": operation_id(s.saga_id, 1, "stripe.charge", "forward")}
    assert "RECONCILE_ANSWERED" in types(log)


def test_the_refund_key_is_deterministic_and_already_refunded_counts_as_success(stripe_server: StripeServer) -> None:
    with pytest.raises(SagaAborted), saga_scope(FileWAL("a.wal")) as s:
        charge(1500, "eur", "tok_visa", credential_ref="stripe_test")
        raise RuntimeError("later failure")
    (request,) = stripe_server.refund_requests
    assert stripe_server.idempotent.get(("/v1/refunds", operation_id(s.saga_id, 1, "stripe.charge", "compensate")))
    # A late daemon with a different key: Stripe says charge_already_refunded, the connector says done.
    assert refund(request["charge"], "stripe_test", idempotency_key="another-key")["status"] == "already_refunded"
    assert stripe_server.refunds_applied == [request["charge"]]


def test_the_credential_is_resolved_at_use_and_never_logged(stripe_server: StripeServer, tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    with FileWAL(log) as wal, pytest.raises(SagaAborted), saga_scope(wal):
        charge(100, "usd", "tok_visa", credential_ref="stripe_test")
        raise RuntimeError("later failure")
    text = log.read_text()
    assert stripe_server.api_key not in text and '"credential_ref":"stripe_test"' in text
    from agent_saga.connectors import set_credential_resolver

    set_credential_resolver(None)
    with pytest.raises(CredentialError, match="no resolver is set"):
        refund("ch_0001", "stripe_test")
    with pytest.raises(CredentialError, match="shaped like a secret"):
        refund("ch_0001", stripe_server.api_key)  # the key itself, pasted where its name belongs


def test_search_absence_is_not_proof(stripe_server: StripeServer) -> None:
    seen = observe_charge(idempotency_key="never-used-key", credential_ref="stripe_test")
    assert seen.exists is None and "not proof" in seen.detail


def _recover(log: Path, config: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(log), "--import", config,
         "--lease-grace", "0"],
        env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.parametrize("with_reconciler", [True, False])
def test_a_worker_killed_after_stripe_took_the_charge_is_refunded_once_by_recover(
    stripe_server: StripeServer, tmp_path: Path, with_reconciler: bool,
) -> None:
    log = tmp_path / "agent.wal"
    worker = subprocess.Popen([sys.executable, str(HERE / "stripe_worker.py"), str(log)], env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stripe_server.kill_on_charge = worker.pid
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == -9, err  # killed by the provider's side, mid-call
    assert types(log)[-1] == "STEP_INTENT" and list(stripe_server.charges) == ["ch_0001"]
    time.sleep(0.5)  # the dead worker's lease (0.3 s) runs out

    config = "stripe_config" if with_reconciler else "stripe_config_no_reconciler"
    done = _recover(log, config)
    saga = fold(read_records(log))
    (view,) = saga.values()
    if with_reconciler:
        assert done.returncode == 0, done.stdout + done.stderr
        assert stripe_server.refunds_applied == ["ch_0001"] and len(stripe_server.refund_requests) == 1
        assert view.ended == "SAGA_ROLLED_BACK" and view.steps[1].compensated
        assert _recover(log, config).returncode == 0
        assert len(stripe_server.refund_requests) == 1  # a second sweep sends nothing
    else:
        assert done.returncode == 1 and "unknown-outcome" in done.stdout
        assert stripe_server.refund_requests == []  # nothing guessed
        assert stripe_server.charges["ch_0001"]["refunded"] is False


def test_agent_saga_reconcile_clean_drift_and_unverifiable(
    stripe_server: StripeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    clean, lying = tmp_path / "clean.wal", tmp_path / "lying.wal"
    for log in (clean, lying):
        stripe_server.lying_refunds = log is lying
        with FileWAL(log) as wal, pytest.raises(SagaAborted), saga_scope(wal):
            charge(4200, "usd", "tok_visa", credential_ref="stripe_test")
            raise RuntimeError("later failure")
    lying_saga = next(iter(fold(read_records(lying))))

    def reconcile(log: Path, *imports: str) -> tuple[int, str]:
        args = ["reconcile", "--wal-path", str(log)]
        for name in imports:
            args += ["--import", name]
        code = main([*args, "--json"])
        return code, capsys.readouterr().out

    code, out = reconcile(clean, "stripe_config")
    assert code == 0 and json.loads(out)["counts"]["confirmed"] == 1
    code, out = reconcile(lying, "stripe_config")
    (finding,) = json.loads(out)["findings"]
    assert code == 1
    assert (finding["saga"], finding["step"], finding["tool"], finding["status"]) == (lying_saga, 1, "stripe.charge", "drift")
    assert finding["message"] == "its undo reported success, but the effect is still standing"
    assert finding["amount"] == 4200

    from agent_saga.registry import unregister_reconciler

    unregister_reconciler("stripe.charge")
    unregister_reconciler("stripe.refund")
    try:
        code, out = reconcile(clean)
        assert code == 3 and json.loads(out)["verdict"] == "nothing could be verified"
    finally:
        import importlib

        import agent_saga.connectors.stripe as module

        importlib.reload(module)  # registers them again
