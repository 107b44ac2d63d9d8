"""The seed's code snippets, run as written against small local stand-ins."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import agent_saga as saga
from agent_saga import (
    ActionSemantics,
    AgentKit,
    Compensation,
    MemoryWAL,
    SagaAborted,
    compensator,
    inverse_of,
    saga_scope,
)
from agent_saga.registry import unregister


class Cloud:
    """Stand-ins for EC2, Pinecone and Jira that remember what exists."""

    def __init__(self) -> None:
        self.instances: set[str] = set()
        self.namespaces: set[str] = set()
        self.issues: dict[str, str] = {}

    def run_instances(self, ImageId: str, InstanceType: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        iid = f"i-{len(self.instances) + 1:04d}"
        self.instances.add(iid)
        return {"Instances": [{"InstanceId": iid, "ImageId": ImageId}]}

    def create_namespace(self, name: str) -> dict[str, str]:
        self.namespaces.add(name)
        return {"namespace": name}

    def create_issue(self, project: str, summary: str) -> dict[str, str]:
        key = f"{project}-{len(self.issues) + 1}"
        self.issues[key] = "open"
        return {"key": key}


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    world = Cloud()

    @compensator("aws.terminate_instance")
    def terminate(instance_id: str) -> None:
        world.instances.remove(instance_id)

    @compensator("pinecone.delete_namespace")
    def drop_ns(namespace: str) -> None:
        world.namespaces.remove(namespace)

    @compensator("jira.close_issue")
    def close(issue_key: str) -> None:
        world.issues[issue_key] = "closed"

    world.terminate, world.drop_ns, world.close = terminate, drop_ns, close  # type: ignore[attr-defined]
    yield world
    for name in ("aws.terminate_instance", "pinecone.delete_namespace", "jira.close_issue"):
        unregister(name)


async def test_saga_scope_snippet_unwinds_three_systems(cloud: Any) -> None:
    ec2 = index = jira = cloud
    terminate, drop_ns, close = cloud.terminate, cloud.drop_ns, cloud.close
    ami = "ami-123"
    C = ActionSemantics.COMPENSABLE

    with pytest.raises(SagaAborted) as info:
        async with saga_scope() as saga:  # the default durable FileWAL
            # 1. infrastructure
            box = await saga.execute(
                tool="aws.run_instances", semantics=C,
                forward=lambda: ec2.run_instances(ImageId=ami, InstanceType="m6i.large"),
                compensate=lambda r: Compensation(
                    fn=terminate, handler="aws.terminate_instance",
                    kwargs={"instance_id": r["Instances"][0]["InstanceId"]}))

            # 2. vector store
            await saga.execute(
                tool="pinecone.create_namespace", semantics=C,
                forward=lambda: index.create_namespace("acme"),
                compensate=lambda r: Compensation(
                    fn=drop_ns, handler="pinecone.delete_namespace",
                    kwargs={"namespace": r["namespace"]}))

            # 3. ticket
            await saga.execute(
                tool="jira.create_issue", semantics=C,
                forward=lambda: jira.create_issue(project="ONB", summary="Onboard acme"),
                compensate=lambda r: Compensation(
                    fn=close, handler="jira.close_issue",
                    kwargs={"issue_key": r["key"]}))

            assert box["Instances"][0]["InstanceId"] in cloud.instances
            raise ValueError("hallucinated region us-wast-9")

    assert cloud.instances == set() and cloud.namespaces == set()
    assert cloud.issues == {"ONB-1": "closed"}
    report = info.value.report
    assert report.clean
    assert [s.tool for s in report.compensated] == [
        "jira.create_issue", "pinecone.create_namespace", "aws.run_instances"]


async def test_agentkit_snippet(cloud: Any) -> None:
    charges: dict[str, str] = {}

    async def stripe_charge(amount: int) -> dict[str, Any]:
        cid = f"ch_{len(charges) + 1}"
        charges[cid] = "charged"
        return {"id": cid, "amount": amount}

    @compensator("refund")
    def refund(id: str, idempotency_key: str | None = None) -> None:
        charges[id] = "refunded"

    async def ship_order(order: str) -> None:
        raise RuntimeError("warehouse offline")

    try:
        kit = AgentKit(name="my-agent")

        charge = kit.safe_tool(stripe_charge, semantics="COMPENSABLE",
                               compensate=lambda r: {"handler": "refund", "kwargs": {"id": r["id"]}})

        with pytest.raises(SagaAborted) as info:
            async with kit.transaction():        # a saga boundary
                await charge(amount=4200)        # gated, logged, refunded on any failure
                await ship_order("o-1")          # if this throws, the charge is rolled back

        assert charges == {"ch_1": "refunded"}
        assert info.value.report.clean

        manifest = kit.guarantees()
        assert manifest["manifest_version"] == 1 and manifest["kit"] == "my-agent"
        assert {"id": "lifo-rollback"} .items() <= manifest["enforced"][2].items()
        assert any("isolation" in text for text in manifest["not_claimed"])
        assert manifest["tools"] == [{"name": "stripe_charge", "semantics": "COMPENSABLE", "undo": "explicit"}]
        assert manifest["log"]["durable"] is True

        posture = kit.status()
        assert posture["ok"] is True and posture["signals"]["log"]["ok"] is True

        # zero ceremony: outside a transaction the same callable runs untouched
        assert (await charge(amount=1))["id"] == "ch_2"
    finally:
        unregister("refund")


def test_agentkit_status_fails_closed_on_a_memory_log() -> None:
    kit = AgentKit("k", wal=MemoryWAL())
    posture = kit.status()
    assert posture["ok"] is False
    assert "NOT durable" in posture["signals"]["log"]["detail"]


def test_agentkit_status_fails_closed_when_a_signal_cannot_be_read() -> None:
    class BrokenGate:
        def status(self) -> dict[str, Any]:
            raise ConnectionError("switch store unreachable")

    kit = AgentKit("k", gate=BrokenGate())  # type: ignore[arg-type]
    posture = kit.status()
    assert posture["ok"] is False
    assert "unreachable" in posture["signals"]["gate"]["detail"]


async def test_inverse_of_shorthand_snippet() -> None:
    refunded: list[str] = []

    def stripe_charge(amount: int) -> dict[str, Any]:
        return {"id": "ch_42", "amount": amount}

    @inverse_of(stripe_charge, maps={"charge_id": "id"})
    @compensator("stripe.refund")
    def refund_charge(charge_id: str) -> None:
        refunded.append(charge_id)

    try:
        kit = AgentKit(name="shop")
        charge = kit.safe_tool(stripe_charge, semantics="COMPENSABLE")   # pairing found
        assert kit.guarantees()["tools"][0]["undo"] == "paired"
        with pytest.raises(SagaAborted) as info:
            with kit.transaction():
                charge(amount=4200)
                raise RuntimeError("later step failed")
        assert refunded == ["ch_42"]
        assert info.value.report.compensated[0].compensation == "stripe.refund(charge_id='ch_42')"
    finally:
        unregister("stripe.refund")


async def test_guard_snippet_protects_an_async_function() -> None:
    undone: list[int] = []

    @saga.tool(semantics="COMPENSABLE",
               compensate=lambda r: Compensation(fn=lambda amount: undone.append(amount), kwargs={"amount": r}))
    async def reserve(amount: int) -> int:
        return amount

    @saga.guard
    async def checkout_cart(user_id: str, amount: float) -> None:
        await reserve(int(amount))
        raise RuntimeError(f"payment for {user_id} failed")

    with pytest.raises(SagaAborted) as info:
        await checkout_cart("u1", 30.0)
    assert undone == [30] and info.value.report.clean


def test_saga_decorator_on_a_sync_function_with_options() -> None:
    wal = MemoryWAL()
    undone: list[str] = []

    @saga.tool(semantics="REVERSIBLE", compensate=lambda r: Compensation(fn=lambda: undone.append(r)))
    def add_line(text: str) -> str:
        return text

    @saga.saga(wal=wal, name="report")
    def build(fail: bool) -> str:
        add_line("one")
        add_line("two")
        if fail:
            raise KeyError("missing section")
        return "built"

    assert build(False) == "built"
    with pytest.raises(SagaAborted):
        build(True)
    assert undone == ["two", "one"]
    names = {r["body"].get("name") for r in wal.records() if r["type"] == "SAGA_STARTED"}
    assert names == {"report"}


# -- issue 26 part 1: the README's provenance snippet, run as written --------------------------


def test_readme_provenance_snippet_runs_and_prints_what_its_comments_say(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Why it acted: argument provenance", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the README's provenance section has no python block"
    snippet = code.group(1)
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), namespace)  # the README's own code
    printed = capsys.readouterr().out.splitlines()
    promised = [line[2:] for line in snippet.splitlines() if line.startswith("# ")]
    assert printed == promised
    assert isinstance(namespace["gate"], saga.PreFlightGate)
    assert namespace["gate"].rules[0].name == "provenance"
