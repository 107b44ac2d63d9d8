"""saga.yaml: checked against the published schema, every problem named with its line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml
from agent_saga_temporal import Limits, ManifestError, load_manifest, parse_manifest, schema
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from agent_saga_temporal.manifest import check_job

GOOD = """\
version: 1
name: checkout
goal: sell one thing
facts: {order_id: o-1, amount: 5}
steps:
  - name: charge
    semantics: COMPENSABLE
    args: {order_id: $facts.order_id, amount: $facts.amount}
    undo: {handler: refund, args: {charge_id: $result.id, amount: $args.amount}}
  - name: email
    semantics: IRREVERSIBLE
    after: [charge]
invariants: [paid]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, source="saga.yaml")
    return caught.value.problems


def test_a_good_manifest_becomes_a_job() -> None:
    job = parse_manifest(GOOD)
    assert [s.name for s in job.steps] == ["charge", "email"]
    assert job.steps[0].undo is not None and job.steps[0].undo.handler == "refund"
    assert job.steps[1].after == ["charge"] and job.steps[1].effect == "email"
    assert job.limits.max_turns == 20


def test_the_example_manifest_validates_against_the_published_schema() -> None:
    text = resources.files("agent_saga_temporal.examples.ecommerce").joinpath("saga.yaml").read_text()
    jsonschema.Draft202012Validator(schema()).validate(yaml.safe_load(text))
    assert checkout_job().invariants == ["inventory_held", "payment_captured", "shipment_accepted"]


@pytest.mark.parametrize(("change", "expected"), [
    (("semantics: IRREVERSIBLE", "semantics: MAYBE"),
     "saga.yaml:11: steps[1].semantics: 'MAYBE' is not one of ['REVERSIBLE', 'COMPENSABLE', 'IRREVERSIBLE']"),
    (("    undo: {handler: refund, args: {charge_id: $result.id, amount: $args.amount}}\n", ""),
     "saga.yaml:6: steps[0]: a COMPENSABLE step needs undo: {handler: <a @compensator>, args: {...}}"),
    (("invariants: [paid]", "invariants: []"), "saga.yaml:13: invariants: [] should be non-empty"),
    (("after: [charge]", "after: [charge, refund_all]"), "saga.yaml:12: steps[1].after: no step is named 'refund_all'"),
    (("after: [charge]", "after: [email]"), "saga.yaml:12: steps[1].after: a step cannot wait for itself"),
    (("$facts.amount}", "$facts.amount_cents}"),
     "saga.yaml:8: steps[0].args: $facts.amount_cents: no 'amount_cents' in {amount, order_id}"),
    (("amount: $args.amount}}", "amount: $args.total}}"),
     "saga.yaml:9: steps[0].undo.args: $args.total: no 'total' in {amount, order_id}"),
    (("charge_id: $result.id", "charge_id: $reply.id"),
     "saga.yaml:9: steps[0].undo.args: $reply.id refers to nothing here (use $facts., $args...., or $$ for a literal $)"),
    (("  - name: email", "  - name: finish"), "saga.yaml:10: steps[1].name: 'finish' is reserved: it is the choice that ends a job"),
    (("goal: sell one thing", "goal: sell one thing\nretries: 3"),
     "saga.yaml:1: Additional properties are not allowed ('retries' was unexpected) (allowed here: facts, finish, "
     "goal, invariants, limits, name, steps, tags, version)"),
    # A job may name its finishing choice; no step may then take that name.
    (("invariants: [paid]", "invariants: [paid]\nfinish: email"),
     "saga.yaml:10: steps[1].name: 'email' is this job's finishing choice (finish:); name the step otherwise"),
    (("facts: {order_id: o-1, amount: 5}", "facts: {order_id: o-1, amount: 5, due: 2024-05-01}"),
     "saga.yaml:4: facts.due: date '2024-05-01' is not JSON: quote it"),
    (("name: checkout", "name: checkout\nname: other"),
     "saga.yaml:3: key 'name' appears twice in one mapping (YAML would keep only the last)"),
])
def test_each_problem_is_named_with_its_line(change: tuple[str, str], expected: str) -> None:
    old, new = change
    assert old in GOOD
    assert expected in problems(GOOD.replace(old, new, 1))


def test_a_cycle_of_after_orders_is_refused() -> None:
    text = GOOD.replace("    args: {order_id", "    after: [email]\n    args: {order_id", 1)
    assert problems(text) == [
        "saga.yaml:6: steps[0]: the 'after' orders form a cycle (charge -> email -> charge), so none can run"
    ]


def test_all_problems_are_reported_at_once() -> None:
    text = GOOD.replace("semantics: IRREVERSIBLE", "semantics: maybe").replace("invariants: [paid]", "invariants: 3")
    found = problems(text)
    assert len(found) == 2
    assert str(ManifestError(found)).startswith("2 problems:\n  saga.yaml:11:")


def test_not_yaml_and_not_a_mapping() -> None:
    assert problems("steps: [unclosed") [0].startswith("saga.yaml:1: not valid YAML")
    assert problems("- a list") == ["saga.yaml:1: a manifest is a mapping with name, goal, steps and invariants"]


def test_load_manifest_names_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"missing\.yaml: cannot read it: No such file or directory"):
        load_manifest(tmp_path / "missing.yaml")


def test_the_cli_checks_a_file_and_prints_the_schema(tmp_path: Path) -> None:
    good, bad = tmp_path / "saga.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace("semantics: IRREVERSIBLE", "semantics: MAYBE"))
    cli = [sys.executable, "-m", "agent_saga_temporal"]
    ok = subprocess.run([*cli, "check", str(good)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "ok: job 'checkout', 2 steps, 1 invariants" in ok.stdout
    failed = subprocess.run([*cli, "check", str(bad)], capture_output=True, text=True, check=False)
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"{bad}:11: steps[1].semantics: 'MAYBE' is not one of")
    missing = subprocess.run([*cli, "check", str(tmp_path / "nope.yaml")], capture_output=True, text=True, check=False)
    assert missing.returncode == 3
    printed = subprocess.run([*cli, "schema"], capture_output=True, text=True, check=False)
    assert json.loads(printed.stdout) == schema()
    assert schema()["$id"] == "urn:agent-saga:temporal:saga-manifest:1"


def test_a_job_built_in_code_meets_the_same_rules() -> None:
    job = parse_manifest(GOOD)
    assert check_job(job) == job
    broken = dataclasses.replace(job, steps=[dataclasses.replace(job.steps[0], undo=None), job.steps[1]])
    with pytest.raises(ManifestError) as caught:
        check_job(broken)
    assert caught.value.problems == [
        "job 'checkout': steps[0]: a COMPENSABLE step needs undo: {handler: <a @compensator>, args: {...}}"
    ]
    with pytest.raises(ManifestError, match=r"limits\.undo_attempts: 0 is less than the minimum of 1"):
        check_job(dataclasses.replace(job, limits=Limits(undo_attempts=0)))


def test_not_a_number_is_not_json() -> None:
    assert "saga.yaml:4: facts.amount: float 'nan' is not JSON: quote it" in problems(
        GOOD.replace("amount: 5}", "amount: .nan}")
    )
