"""CrewAI's own import emits an ImportWarning (crewai.rag forbids setting its child module
as an attribute); the suite runs with warnings as errors, so crewai is imported once here
with exactly that warning ignored. Telemetry and tracing are switched off first."""

import os
import warnings

os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true", CREWAI_TRACING_ENABLED="false")

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=ImportWarning, message=r"Cannot set an attribute on 'crewai")
    import crewai  # noqa: F401

# CrewAI reads its own deprecated fields on every run (Agent.post_init_setup touches
# function_calling_llm, allow_code_execution, ...). Deprecations raised *from crewai's
# modules* are ignored; any other warning, ours included, still fails the suite.
CREWAI_OWN_WARNINGS = (
    r"ignore::DeprecationWarning:crewai\..*",
)


def pytest_configure(config: object) -> None:
    for line in CREWAI_OWN_WARNINGS:
        config.addinivalue_line("filterwarnings", line)  # type: ignore[attr-defined]
