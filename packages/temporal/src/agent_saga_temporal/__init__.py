"""agent-saga on Temporal: the agent proposes the next step, a deterministic workflow disposes.

One saga vocabulary, two engines: steps are declared with the core's
``ActionSemantics``, undone by the core's ``@compensator`` handlers, settled by its
``@reconciler`` observers and checked by its ``GatePort``; here the saga runs as a
Temporal workflow whose every effect, decision and question is an activity.
"""

from agent_saga_temporal.activities import SagaActivities
from agent_saga_temporal.devserver import DevServer, DevServerError, temporal_binary
from agent_saga_temporal.drivers import (
    OPENROUTER_BASE_URL,
    Driver,
    ModelDriver,
    PydanticAIDriver,
    ScriptedDriver,
)
from agent_saga_temporal.export import Exported, ExportError, export_job
from agent_saga_temporal.jobs import (
    DEFAULT_TASK_QUEUE,
    report,
    resolve,
    saga_replayer,
    saga_worker,
    settled,
    start_job,
)
from agent_saga_temporal.manifest import ManifestError, load_manifest, parse_manifest, schema
from agent_saga_temporal.model import (
    FINISH,
    JobEvent,
    JobReport,
    JobSpec,
    Limits,
    Proposal,
    ProposalRecord,
    Resolution,
    Situation,
    Status,
    StepOption,
    StepReport,
    StepSpec,
    UndoSpec,
)
from agent_saga_temporal.registry import Verdict, effect, invariant
from agent_saga_temporal.workflow import WORKFLOW_NAME, SagaJob

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "FINISH",
    "OPENROUTER_BASE_URL",
    "WORKFLOW_NAME",
    "DevServer",
    "DevServerError",
    "Driver",
    "ExportError",
    "Exported",
    "JobEvent",
    "JobReport",
    "JobSpec",
    "Limits",
    "ManifestError",
    "ModelDriver",
    "Proposal",
    "ProposalRecord",
    "PydanticAIDriver",
    "Resolution",
    "SagaActivities",
    "SagaJob",
    "ScriptedDriver",
    "Situation",
    "Status",
    "StepOption",
    "StepReport",
    "StepSpec",
    "UndoSpec",
    "Verdict",
    "effect",
    "export_job",
    "invariant",
    "load_manifest",
    "parse_manifest",
    "report",
    "resolve",
    "saga_replayer",
    "saga_worker",
    "schema",
    "settled",
    "start_job",
    "temporal_binary",
]
