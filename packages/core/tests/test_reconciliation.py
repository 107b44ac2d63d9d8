"""The reconciliation pass and `agent-saga reconcile`: drift, clean, unverifiable, never guessed."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from reconcile_world import WORLD, Died, charge, refund

from agent_saga import Compensation, FileWAL, SagaAborted, reconciler, saga_scope
from agent_saga.cli.main import main
from agent_saga.engine.saga import Saga
from agent_saga.ids import operation_id
from agent_saga.log.chain import ChainUnverified
from agent_saga.log.file import read_records
from agent_saga.reconciliation import reconcile
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.lease import lease_keeper
from agent_saga.registry import unregister_reconciler


@pytest.fixture(autouse=True)
def _world() -> Iterator[None]:
    WORLD.reset()
    yield
    WORLD.reset()


def closure(r: Any) -> Compensation:
    return Compensation(fn=refund, handler="rw.refund", kwargs={"charge_id": r["id"]})


class DyingWAL(FileWAL):
    """A log whose process "dies" once ``crash_at`` records are on disk: nothing later is
    written, and the world refuses every later call (a dead process makes none)."""

    crash_at: int | None = None
    written = 0

    def _write(self, batch: Any) -> None:
        for entry in batch:
            if self.crash_at is not None and self.written >= self.crash_at:
                WORLD.dead = True
                continue
            super()._write([entry])
            self.written += 1


def run_saga(
    path: Path, steps: int = 1, *, fail: bool = True, undo: str = "recipe", inline: bool = False,
    crash_at: int | None = None,
) -> str:
    """Charge ``steps`` times (step i charges 10*i), then fail (rollback) or complete."""
    wal = DyingWAL(path)
    wal.crash_at = crash_at
    saga_id = ""
    try:
        with saga_scope(wal, name="checkout") as s:
            saga_id = s.saga_id
            for i in range(1, steps + 1):
                s.execute(tool="rw.charge", semantics="COMPENSABLE", args={"amount": 10 * i, "step": i},
                          forward=functools.partial(charge, 10 * i, i),
                          compensate=closure if undo == "closure" else None, reconcile=inline)
            if fail:
                raise RuntimeError("a later step failed")
    except (SagaAborted, Died):
        pass
    finally:
        wal.close()
        lease_keeper().release(wal.path, saga_id)
        WORLD.dead = False
    return saga_id


def test_a_clean_rollback_is_confirmed_by_asking_the_provider(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    run_saga(log, 2)
    assert len(WORLD.by_id) == 2 and not WORLD.standing()
    report = reconcile(log)
    assert report.clean and report.exit_code == 0
    assert [(f.step, f.status, f.observed) for f in report.findings] == [(1, "confirmed", "reversed"),
                                                                        (2, "confirmed", "reversed")]


def test_a_refund_that_said_yes_and_did_nothing_is_drift_naming_saga_step_and_tool(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    WORLD.lie = {2}
    saga = run_saga(log, 2)
    rolled = next(r for r in read_records(log) if r["type"] == "SAGA_ROLLED_BACK")
    assert rolled["body"]["clean"] is True  # the log believed the 200
    report = reconcile(log)
    assert report.exit_code == 1 and not report.clean
    (drift,) = report.drift
    assert (drift.saga, drift.step, drift.tool) == (saga, 2, "rw.charge")
    assert "undo reported success" in drift.message and drift.amount == 20
    assert f"[DRIFT] saga {saga} step 2 rw.charge" in report.format_text()
    assert [f.status for f in report.confirmed] == ["confirmed"]  # step 1 really was refunded


def test_a_timed_out_charge_that_landed_and_was_never_compensated_is_drift(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    WORLD.lose = {1}
    run_saga(log, 1, undo="closure")  # no inline question: the step stays UNKNOWN, nothing is refunded
    assert len(WORLD.standing()) == 1
    (finding,) = reconcile(log).findings
    assert finding.status == "drift"
    assert finding.message.startswith("timed-out step DID land and is still standing")
    assert "never compensated" in finding.message and finding.amount == 10


def test_a_call_that_never_reached_the_provider_is_confirmed_absent(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    WORLD.never = {1}
    run_saga(log, 1, undo="closure")
    (finding,) = reconcile(log).findings
    assert (finding.status, finding.observed, finding.expected) == ("confirmed", "absent", "undone")


def test_with_no_reconciler_nothing_is_verified_and_exit_is_3(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    with FileWAL(log) as wal, saga_scope(wal) as s:
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: "sent")
    report = reconcile(log)
    assert report.exit_code == 3 and report.verdict == "nothing could be verified"
    (finding,) = report.unverifiable
    assert "no @reconciler is registered for 'mail.send'" in finding.message


@pytest.mark.parametrize("failure", ["raises", "times out", "not an observation"])
def test_a_reconciler_that_fails_is_unverifiable_never_confirmed(tmp_path: Path, failure: str) -> None:
    log = tmp_path / "a.wal"
    with FileWAL(log) as wal, saga_scope(wal) as s:
        s.execute(tool="flaky.thing", semantics="IRREVERSIBLE", forward=lambda: "done")

    @reconciler("flaky.thing")
    def observe(*, idempotency_key: str) -> Any:
        if failure == "raises":
            raise ConnectionError("503 from the provider")
        if failure == "times out":
            time.sleep(5)
        return {"exists": True}

    try:
        report = reconcile(log, timeout=0.2)
    finally:
        unregister_reconciler("flaky.thing")
    (finding,) = report.findings
    assert finding.status == "unverifiable" and report.exit_code == 3
    assert finding.detail.startswith("the reconciler failed")


def test_an_open_saga_is_skipped_not_confirmed(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    wal = FileWAL(log)
    boundary = saga_scope(wal)
    s = boundary.__enter__()
    s.execute(tool="rw.charge", semantics="COMPENSABLE", args={"amount": 10},
              forward=functools.partial(charge, 10, 1))
    wal.barrier()
    try:
        report = reconcile(log)
    finally:
        boundary.__exit__(None, None, None)
        wal.close()
    assert [f.status for f in report.findings] == ["skipped"] and report.exit_code == 3


def test_an_effect_whose_records_cannot_be_read_is_unverifiable_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_saga.log.crypto import AESGCMEncryptor, generate_key

    log = tmp_path / "a.wal"
    monkeypatch.delenv("AGENT_SAGA_WAL_KEY", raising=False)
    with FileWAL(log, encryptor=AESGCMEncryptor.from_base64(generate_key())) as wal, saga_scope(wal) as s:
        s.execute(tool="rw.charge", semantics="COMPENSABLE", args={"amount": 10, "step": 1},
                  forward=functools.partial(charge, 10, 1))
    report = reconcile(log)  # no key here: the bodies (tool, arguments) are unreadable
    assert [(f.status, f.step) for f in report.findings] == [("unverifiable", 1)]
    assert "cannot be read here" in report.findings[0].message and report.exit_code == 3


def test_a_log_whose_chain_does_not_verify_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    run_saga(log, 1)
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"amount":10', '"amount":11')  # the intent: an edited record
    log.write_text("".join(lines))
    with pytest.raises(ChainUnverified, match="Refusing to reconcile"):
        reconcile(log)
    assert reconcile(log, trust_unverified=True).chain != "intact"


def test_the_cli_exit_codes_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean, lying, blind = tmp_path / "clean.wal", tmp_path / "lying.wal", tmp_path / "blind.wal"
    run_saga(clean, 1)
    WORLD.lie = {1}
    saga = run_saga(lying, 1)
    with FileWAL(blind) as wal, saga_scope(wal) as s:
        s.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=lambda: "sent")
    (tmp_path / "my_reconcilers.py").write_text("import reconcile_world\n")

    def run(*args: str) -> tuple[int, str]:
        code = main(["reconcile", "--import", "my_reconcilers", *args])
        return code, capsys.readouterr().out

    code, out = run("--wal-path", str(clean))
    assert code == 0 and out.rstrip().endswith("clean")
    code, out = run("--wal-path", str(lying))
    assert code == 1 and f"[DRIFT] saga {saga} step 1 rw.charge: its undo reported success" in out
    code, out = run("--wal-path", str(lying), "--json")
    data = json.loads(out)
    assert code == 1 and data["exit_code"] == 1 and data["counts"]["drift"] == 1
    assert data["findings"][0] | {"detail": ""} == {
        "saga": saga, "step": 1, "tool": "rw.charge", "status": "drift", "expected": "reversed",
        "observed": "standing", "amount": 10, "detail": "",
        "message": "its undo reported success, but the effect is still standing"}
    code, out = run("--wal-path", str(blind))
    assert code == 3 and "[UNVERIFIABLE]" in out
    assert main(["reconcile", "--wal-path", str(tmp_path / "missing.wal")]) == 3
    assert main(["reconcile", "--wal-path", str(clean), "--import", "no_such_module_here"]) == 2


# -- the recovery daemon asks too ----------------------------------------------------------


def cut_after_last_intent(log: Path) -> None:
    """Keep the log up to its last STEP_INTENT: the process died with the call in flight."""
    lines = log.read_bytes().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if b'"STEP_INTENT"' in line)
    log.write_bytes(b"".join(lines[: last + 1]))


def recover(log: Path) -> Any:
    with RecoveryDaemon(log, clock=lambda: time.time() + 3600) as daemon:
        return daemon.sweep()


def dead_saga(log: Path) -> Saga:
    """A started saga on ``log`` that will never end, as a killed process leaves one (see ``bury``)."""
    saga = Saga(FileWAL(log), name="dies")
    saga.start()
    return saga


def bury(saga: Saga) -> None:
    """The process is gone: what it wrote is on disk, its lease is no longer renewed."""
    saga.wal.barrier()
    lease_keeper().release(saga.wal.path, saga.saga_id)  # type: ignore[attr-defined]
    saga.wal.close()


def orphan_in_flight(log: Path, undo: str = "recipe") -> str:
    """A saga whose process died after the provider took the charge, before the commit record."""
    saga = dead_saga(log)
    saga.execute_sync(tool="rw.charge", semantics="COMPENSABLE", args={"amount": 10, "step": 1},
                      forward=functools.partial(charge, 10, 1), compensate=closure if undo == "closure" else None)
    bury(saga)
    cut_after_last_intent(log)
    return saga.saga_id


def test_the_daemon_refunds_a_landed_in_flight_charge_through_the_intents_recipe(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    saga = orphan_in_flight(log)
    report = recover(log)
    assert report.recovered == [saga] and not report.new_escalations
    assert WORLD.refund_calls == ["ch_1"] and not WORLD.standing()
    body = {r["type"]: r["body"] for r in read_records(log)}
    assert body["RECONCILE_ANSWERED"]["exists"] is True
    assert body["STEP_COMMITTED"]["reconciled"] is True
    assert body["STEP_COMMITTED"]["compensation"]["key"] == operation_id(saga, 1, "rw.charge", "compensate")
    assert body["SAGA_ROLLED_BACK"]["clean"] is True
    assert recover(log).recovered == [] and WORLD.refund_calls == ["ch_1"]  # exactly once
    assert reconcile(log).clean


def test_the_daemon_leaves_alone_an_in_flight_call_that_never_landed(tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    saga = orphan_in_flight(log)
    WORLD.reset()  # the provider never saw it
    report = recover(log)
    assert report.recovered == [saga] and not report.new_escalations and WORLD.refund_calls == []
    types = [r["type"] for r in read_records(log)]
    assert "STEP_NOT_APPLIED" in types and "STEP_UNKNOWN" not in types
    assert next(r for r in read_records(log) if r["type"] == "SAGA_ROLLED_BACK")["body"]["clean"] is True


@pytest.mark.parametrize("case", ["closure", "blind"])
def test_the_daemon_escalates_with_the_facts_when_it_cannot_undo(tmp_path: Path, case: str) -> None:
    log = tmp_path / "a.wal"
    orphan_in_flight(log, undo="closure" if case == "closure" else "recipe")
    WORLD.blind = case == "blind"  # then the recipe cannot be followed: it needs the charge id
    report = recover(log)
    (escalation,) = report.new_escalations
    if case == "closure":
        assert escalation.kind == "no-undo"
        assert "the reconciler says it landed" in escalation.detail and "@inverse_of" in escalation.detail
    else:
        assert escalation.kind == "unknown-outcome"
        assert "the reconciler says it could not tell (provider API down)" in escalation.detail
    assert WORLD.refund_calls == [] and len(WORLD.standing()) == 1
    assert not next(r for r in read_records(log) if r["type"] == "SAGA_ROLLED_BACK")["body"]["clean"]
    assert reconcile(log).exit_code == (1 if case == "closure" else 3)


# -- the property -------------------------------------------------------------------------

scenario = st.fixed_dictionaries({
    "steps": st.integers(1, 3),
    "lose": st.sets(st.integers(1, 3)),
    "never": st.sets(st.integers(1, 3)),
    "lie": st.sets(st.integers(1, 3)),
    "fail": st.booleans(),
    "undo": st.sampled_from(["recipe", "closure"]),
    "inline": st.booleans(),
    "crash_at": st.none() | st.integers(1, 30),  # the process dies after this many records
    "blind": st.booleans(),  # the provider cannot answer the later pass
})


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario)
def test_no_effect_is_both_standing_and_reported_clean(tmp_path: Path, sc: dict[str, Any]) -> None:
    WORLD.reset()
    WORLD.lose, WORLD.never, WORLD.lie = set(sc["lose"]), set(sc["never"]) - set(sc["lose"]), set(sc["lie"])
    log = tmp_path / f"p{time.monotonic_ns()}.wal"
    saga = run_saga(log, sc["steps"], fail=sc["fail"], undo=sc["undo"], inline=sc["inline"],
                    crash_at=sc["crash_at"])
    recover(log)  # a saga whose process died is finished by the daemon (a no-op otherwise)
    WORLD.blind = sc["blind"]
    report = reconcile(log)
    WORLD.blind = False
    completed = any(r["type"] == "SAGA_COMPLETED" for r in read_records(log))
    by_step = {f.step: f for f in report.findings}
    for standing in WORLD.standing():
        step = next(i for i in range(1, 4) if standing["key"] == operation_id(saga, i, "rw.charge", "forward"))
        if completed:
            continue  # a completed saga's charges are meant to stand
        assert not report.clean, (sc, report.format_text())
        finding = by_step.get(step)
        assert finding is None or finding.status != "confirmed", (sc, report.format_text())
    if report.clean:
        assert completed or not WORLD.standing()


@pytest.mark.slow
def test_the_lost_response_example_runs_offline_and_shows_clean_then_drift(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "lost_response.py"
    out = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    honest, lying = out.split("== a refund that says yes and does nothing")
    for part in (honest, lying):
        assert "charge answered by the reconciler: {'id': 'ch_1', 'amount': 4200}" in part
        assert "rollback of saga" in part and ": clean" in part  # what the log believes
    assert "provider: 1 charge(s), refunded: [True]" in honest and honest.rstrip().endswith("; clean")
    assert "provider: 1 charge(s), refunded: [False]" in lying and lying.rstrip().endswith("; DRIFT")
    assert "[DRIFT] saga" in lying and "step 1 pay.charge: its undo reported success" in lying


def test_the_connector_in_connectors_md_works(tmp_path: Path) -> None:
    """The ~20-line connector of docs/CONNECTORS.md, run as written against a local ticket server."""
    import re
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    from agent_saga.connectors import set_credential_resolver
    from agent_saga.registry import unregister

    doc = (Path(__file__).resolve().parents[3] / "docs" / "CONNECTORS.md").read_text()
    source = re.findall(r"```python\n(.*?)```", doc, re.S)[1]
    tickets: dict[str, dict[str, Any]] = {}
    lose = [True]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None: ...

        def _answer(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            assert self.headers["Authorization"] == "Bearer tk_secret_value"
            url = urlsplit(self.path)
            if url.path == "/tickets":
                key = parse_qs(url.query)["external_id"][0]
                self._answer([t for t in tickets.values() if t["external_id"] == key])
            else:
                self._answer(tickets[url.path.rsplit("/", 1)[1]])

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            if self.path == "/tickets":
                ticket = {"id": f"T-{len(tickets) + 1}", "status": "open", **body}
                tickets[ticket["id"]] = ticket
                if lose.pop() if lose else False:
                    self.close_connection = True  # it landed; the answer is lost
                    return
                self._answer(ticket)
            else:
                tickets[self.path.split("/")[2]]["status"] = "closed"
                self._answer({})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    namespace: dict[str, Any] = {}
    exec(source.replace("https://tickets.example.com/api", f"http://127.0.0.1:{server.server_address[1]}"),
         namespace)
    set_credential_resolver(lambda name: {"tickets": "tk_secret_value"}[name])
    log = tmp_path / "t.wal"
    try:
        with FileWAL(log) as wal, pytest.raises(SagaAborted) as aborted, saga_scope(wal):
            assert namespace["open_ticket"]("printer on fire")["id"] == "T-1"  # answer lost, then reconciled
            raise RuntimeError("later failure")
        assert aborted.value.report.clean and tickets["T-1"]["status"] == "closed" and len(tickets) == 1
        assert reconcile(log).clean
        assert "tk_secret_value" not in log.read_text()
    finally:
        set_credential_resolver(None)
        server.shutdown()
        server.server_close()
        unregister("tickets.close")
        unregister_reconciler("tickets.open")
        unregister_reconciler("tickets.close")


def test_the_daemon_resolves_credential_references_at_use_and_never_records_the_secret(tmp_path: Path) -> None:
    from agent_saga import compensator
    from agent_saga.connectors import credential_ref, set_credential_resolver
    from agent_saga.registry import unregister

    used: list[Any] = []

    @compensator("rw.revoke")
    def revoke(grant: str, api_key: str) -> None:
        used.append(api_key)
        raise PermissionError(f"key {api_key} was rejected for {grant}")

    log = tmp_path / "a.wal"
    saga = dead_saga(log)
    saga.execute_sync(tool="grant", semantics="COMPENSABLE", forward=lambda: {"id": "g1"},
                      compensate=lambda r: Compensation(fn=revoke, handler="rw.revoke", kwargs={
                          "grant": r["id"], "api_key": credential_ref("vault_x")}))
    bury(saga)  # the agent died with the grant standing
    set_credential_resolver(lambda name: {"vault_x": "sk_live_resolvedsecret42"}[name])
    try:
        with RecoveryDaemon(log, clock=lambda: time.time() + 3600, max_attempts=1) as daemon:
            daemon.sweep()
    finally:
        set_credential_resolver(None)
        unregister("rw.revoke")
    assert used == ["sk_live_resolvedsecret42"]  # resolved for the call
    evidence = log.read_text() + "".join(p.read_text() for p in (tmp_path / "a.wal.recovery").glob("*.jsonl"))
    assert "resolvedsecret42" not in evidence  # not in the log, the ledger or the escalation queue
    failed = next(r for r in read_records(log) if r["type"] == "COMPENSATION_FAILED")
    assert failed["body"]["error"] == "PermissionError: key <redacted: credential> was rejected for g1"
