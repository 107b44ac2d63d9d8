"""The reconciliation pass (``agent-saga reconcile``): ask the outside systems what the log's effects really are.

For every effect a log records, the ``@reconciler`` registered for the tool (and for its
undo) is asked whether it landed and whether the undo is in effect; each finding is
confirmed, drift, unverifiable or skipped. The pass only reads. See docs/RECONCILIATION.md.
"""

from agent_saga.reconciliation._pass import Finding, ReconciliationReport, reconcile

__all__ = ["Finding", "ReconciliationReport", "reconcile"]
