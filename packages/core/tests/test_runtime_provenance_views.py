"""A provenance refusal on a real log: `agent-saga verify` accepts it, `graph` and the UI show it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_saga import (
    ContextBroker,
    FileWAL,
    PreFlightGate,
    ProvenancePolicy,
    SagaAborted,
    StepRefused,
    saga_scope,
    sourced,
)
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold
from agent_saga.ui import FileSource, build, make_server, to_dot, to_mermaid

DOC = "Invoice 17.\n\nTotal due: 4,200.00 EUR.\n\nPay by 2026-12-01."
REASON = "argument 'amount' must be SOURCED or higher, verified MODEL: untagged (a value nobody tagged is the model's)"
# What the agent wrote can carry control characters: the prohibit reason here is the operator's,
# but the tool name is the agent's, and every picture must show it inert.
EVIL_TOOL = "wire.transfer\u202e"


def write_log(path: Path) -> ContextBroker:
    broker = ContextBroker()
    spans = broker.add_document("invoice-17", DOC)
    policy = ProvenancePolicy().require("stripe.charge", "amount", "SOURCED")
    policy.prohibit("wire.*", "this deployment never initiates wires")
    gate = PreFlightGate(rules=[policy.as_gate_rule(broker)])
    wal = FileWAL(path)
    with saga_scope(wal, name="pay-invoice", gate=gate) as s:
        s.execute(tool="stripe.charge", semantics="REVERSIBLE", args={"amount": sourced(4200, spans[1])},
                  forward=lambda: "ch_1")
    with pytest.raises((StepRefused, SagaAborted)), saga_scope(wal, name="made-up", gate=gate) as s:
        s.execute(tool="stripe.charge", semantics="IRREVERSIBLE", args={"amount": 4200}, forward=lambda: 1)
    with pytest.raises((StepRefused, SagaAborted)), saga_scope(wal, name="wire", gate=gate) as s:
        s.execute(tool=EVIL_TOOL, semantics="IRREVERSIBLE", args={"amount": sourced(4200, spans[1])},
                  forward=lambda: 1)
    wal.close()
    return broker


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prov") / "prov.wal"
    write_log(path)
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_records_hold_level_and_receipt_never_the_text(log: Path) -> None:
    records = list(read_records(log))
    committed = next(r for r in records if r["type"] == "STEP_COMMITTED")
    assert committed["body"]["args"] == {"amount": 4200}
    assert committed["body"]["provenance"]["amount"]["level"] == "SOURCED"
    assert set(committed["body"]["provenance"]["amount"]["receipt"]) == {"doc_id", "start", "end", "sha256"}
    assert "Total due" not in log.read_text()
    refused = [r["body"] for r in records if r["type"] == "STEP_REFUSED"]
    assert [(b["rule"], b["reason"]) for b in refused] == [
        ("provenance", REASON),
        ("provenance", f"{EVIL_TOOL} is prohibited: this deployment never initiates wires"),
    ]


@pytest.mark.slow
def test_agent_saga_verify_and_certify_accept_the_log(log: Path) -> None:
    out = cli("verify", "--wal", str(log), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["status"] == "intact"
    # certify folds the same records: a refused step is no unaccounted effect
    certified = cli("certify", "--wal", str(log))
    assert certified.returncode == 0, certified.stdout + certified.stderr


def test_graph_shows_each_refusal_with_its_rule_and_reason_inert(log: Path) -> None:
    sagas = {s.name: s for s in build(fold(read_records(log)).values())}
    assert sagas["made-up"].steps[0].refusal == f"provenance: {REASON}"
    dot = to_dot(sagas.values())
    mermaid = to_mermaid(sagas.values())
    for text, escaped in ((dot, "\\\\u202e"), (mermaid, "\\u202e")):
        assert "refused by provenance: argument 'amount' must be SOURCED or higher, verified MODEL" in text
        assert f"refused by provenance: wire.transfer{escaped} is prohibited" in text
        assert "\u202e" not in text
    # the committed step carries no refusal line
    assert not any("refused by" in line for line in dot.splitlines() if "REVERSIBLE - committed" in line)
    assert any("REVERSIBLE - committed" in line for line in dot.splitlines())


@pytest.mark.slow
def test_graph_cli_output_renders_with_graphviz(log: Path) -> None:
    assert shutil.which("dot"), "Graphviz is not installed: scripts/services installs it"
    out = cli("graph", "--wal", str(log), "--format", "dot")
    assert out.returncode == 0, out.stderr
    assert "refused by provenance: argument" in out.stdout
    svg = subprocess.run(["dot", "-Tsvg"], input=out.stdout, capture_output=True, text=True, check=False)
    assert svg.returncode == 0, svg.stderr
    assert "refused by provenance: argument" in svg.stdout.replace("&#39;", "'")


def test_the_flight_recorder_api_shows_the_refusal_and_the_provenance(log: Path) -> None:
    import urllib.request

    server = make_server(FileSource(log), port=0)
    server.serve_in_thread()
    try:
        def api(path: str) -> object:
            request = urllib.request.Request(server.url + path)
            if server.token:
                request.add_header("Authorization", f"Bearer {server.token}")
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        runs = api("api/runs")["runs"]  # type: ignore[index]
        by_name = {r["name"]: r for r in runs}
        refused = api(f"api/runs/{by_name['made-up']['id']}")["steps"][0]  # type: ignore[index]
        assert refused["final"] == "refused"
        assert refused["refusal"] == {"rule": "provenance", "reason": REASON}
        wire = api(f"api/runs/{by_name['wire']['id']}")["steps"][0]  # type: ignore[index]
        assert wire["refusal"]["reason"].startswith("wire.transfer\\u202e is prohibited")
        assert wire["provenance"][0]["claim"].startswith("SOURCED invoice-17[")
        paid = api(f"api/runs/{by_name['pay-invoice']['id']}")["steps"][0]  # type: ignore[index]
        assert paid["provenance"] == [{"name": "amount", "claim": paid["provenance"][0]["claim"]}]
        assert paid["provenance"][0]["claim"].startswith("SOURCED invoice-17[") and paid["refusal"] is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_the_mermaid_graph_with_refusal_lines_parses_with_mermaid_itself(log: Path, tmp_path: Path) -> None:
    mermaid = Path(__file__).parent / "mermaid"
    assert (mermaid / "node_modules" / "mermaid").is_dir(), (
        "Mermaid's parser is not installed: run `npm ci --prefix packages/core/tests/mermaid` "
        "(scripts/test does this)")
    out = cli("graph", "--wal", str(log))
    assert out.returncode == 0, out.stderr
    assert "refused by provenance: argument" in out.stdout
    (tmp_path / "prov.mmd").write_text(out.stdout)
    parsed = subprocess.run(["node", str(mermaid / "parse.mjs"), str(tmp_path / "prov.mmd")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
