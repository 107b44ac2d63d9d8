"""The Salesforce connector through `simple-salesforce`, against a local https server speaking its REST API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.connectors.salesforce import update
from agent_saga.errors import ConfigurationError
from agent_saga.log.file import read_records
from agent_saga.reconciliation import reconcile

OPP = "006000000000001"
START = {"Name": "Acme renewal", "StageName": "Prospecting", "Amount": 1000, "Description": None, "Score__c": 7}


@pytest.fixture
def sf(salesforce_server: Any) -> Any:
    salesforce_server.write(OPP, dict(START))
    return salesforce_server


def record(sf: Any) -> dict[str, Any]:
    return {k: v for k, v in sf.records[OPP].items() if k != "LastModifiedDate"}


def test_an_update_is_reverted_field_by_field_and_reconciles_clean(sf: Any, tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    with FileWAL(log) as wal, pytest.raises(SagaAborted) as aborted, saga_scope(wal):
        got = update("Opportunity", OPP, {"StageName": "Closed Won", "Amount": 5000}, credential_ref="sf_test")
        assert got["wrote"] == {"Amount": 5000, "StageName": "Closed Won"}
        raise RuntimeError("a later step failed")
    assert aborted.value.report.clean
    assert record(sf) == {"Id": OPP, **START}
    assert sf.patches[-1] == {"Amount": 1000, "StageName": "Prospecting"}  # only the patched fields
    assert reconcile(log).clean
    sf.write(OPP, {"Name": "Renamed later"})  # a field the saga never touched
    assert reconcile(log).clean  # only the fields the saga touched are compared
    assert sf.session_id not in log.read_text()


def test_a_read_only_field_is_refused_before_anything(sf: Any) -> None:
    with saga_scope(FileWAL("a.wal")), pytest.raises(ConfigurationError, match=r"\['Score__c'\] are not writable"):
        update("Opportunity", OPP, {"Score__c": 1, "Amount": 2}, credential_ref="sf_test")
    assert sf.patches == [] and "STEP_INTENT" not in [r["type"] for r in read_records("a.wal")]


def test_a_change_by_someone_else_makes_the_revert_a_conflict(sf: Any) -> None:
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        update("Opportunity", OPP, {"StageName": "Closed Won"}, credential_ref="sf_test")
        sf.write(OPP, {"Description": "edited by a sales rep"})  # another field, after the saga's write
        raise RuntimeError("a later step failed")
    (failed,) = aborted.value.report.failed
    assert "ConflictError" in failed.detail and "changed after this saga's update" in failed.detail
    assert sf.records[OPP]["StageName"] == "Closed Won" and sf.records[OPP]["Description"] == "edited by a sales rep"


def test_a_flow_that_rewrites_the_reverted_field_is_drift(sf: Any, tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    with FileWAL(log) as wal, pytest.raises(SagaAborted) as aborted, saga_scope(wal) as s:
        update("Opportunity", OPP, {"StageName": "Closed Won"}, credential_ref="sf_test")
        sf.flows = {"StageName": "Closed Won"}  # from now on a flow forces the stage after every write
        raise RuntimeError("a later step failed")
    assert aborted.value.report.clean  # the revert's PATCH answered 204
    report = reconcile(log)
    (drift,) = report.drift
    assert (drift.saga, drift.step, drift.tool) == (s.saga_id, 1, "salesforce.update")
    assert report.exit_code == 1 and "undo reported success" in drift.message


def test_a_lost_patch_response_is_settled_by_reading_the_record(sf: Any) -> None:
    sf.lose_patches = 1
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        got = update("Opportunity", OPP, {"Amount": 4200}, credential_ref="sf_test")
        assert got["wrote"] == {"Amount": 4200}  # what the record says, read back by the reconciler
        raise RuntimeError("a later step failed")
    assert aborted.value.report.clean and record(sf) == {"Id": OPP, **START}
    types = [r["type"] for r in read_records("a.wal")]
    assert "RECONCILE_ANSWERED" in types and types.count("STEP_COMPENSATED") == 1
