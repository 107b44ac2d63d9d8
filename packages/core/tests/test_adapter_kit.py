"""The adapter kit (agent_saga.adapter): an adapter written against it, and the top-level wrap_tool.

The framework here is a small one written for the test (a ``Gadget`` tool type and a
``Runtime`` that calls gadgets with a run context of its own), so every promise of the
base class is checked without any real framework installed; each real adapter's tox env
checks the same promises through its framework's loop (agent_saga.testing).
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from installed import install_adapter, run_with

import agent_saga
from agent_saga import (
    Compensation,
    ConfigurationError,
    MemoryWAL,
    PreFlightGate,
    RetryPolicy,
    SagaAborted,
    StepOptions,
    StepRefused,
    ToolFailed,
    saga_scope,
)
from agent_saga.adapter import Adapter, FrameworkUnsupported, ToolSpec, require_framework, signature_of
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.engine.step_options import option_names
from agent_saga.gate import Rule, arg_exceeds, tool_is
from agent_saga.plugins.manager import plugins
from agent_saga.toolspec import hold_back

# -- a framework, and its adapter written against the kit ------------------------------------


class RunContext:
    """What the framework hands a tool besides the model's arguments."""


@dataclasses.dataclass(frozen=True)
class Gadget:
    name: str
    description: str
    fn: Callable[..., Any]


class Runtime:
    """The framework's loop: calls a gadget's function with the model's arguments and its context."""

    def __init__(self) -> None:
        self.context = RunContext()

    def call(self, gadget: Gadget, **arguments: Any) -> Any:
        if "ctx" in inspect.signature(gadget.fn).parameters:
            arguments["ctx"] = self.context
        return gadget.fn(**arguments)


class Gadgets(Adapter):
    framework = "gadgets"
    distribution = "agent-saga-gadgets"
    tool_types = (Gadget,)
    hint = "make one with Gadget(name, description, fn)"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.fn  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> frozenset[str]:
        return frozenset({"ctx"} & set(inspect.signature(fn).parameters))

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return dataclasses.replace(tool, fn=self.step(spec, tool.fn))

    def patch(self) -> None:
        def make(original: Any) -> Any:
            def call(runtime: Runtime, gadget: Gadget, **arguments: Any) -> Any:
                return self.patched_sync(gadget, lambda: original(runtime, gadget, **arguments), arguments)

            return call

        self.patches.apply(Runtime, "call", make)


calls_seen: list[tuple[str, Any]] = []


def charge(amount: int, ctx: RunContext, idempotency_key: str | None = None) -> dict[str, Any]:
    calls_seen.append(("charge", (amount, type(ctx).__name__, idempotency_key)))
    return {"id": f"ch_{amount}"}


async def acharge(amount: int, ctx: RunContext) -> dict[str, Any]:
    calls_seen.append(("acharge", (amount, type(ctx).__name__)))
    return {"id": f"ach_{amount}"}


def refund(result: dict[str, Any]) -> Compensation:
    return Compensation(fn=lambda: calls_seen.append(("refund", result["id"])))


@pytest.fixture
def adapter() -> Gadgets:
    calls_seen.clear()
    return Gadgets()


def _steps(wal: MemoryWAL) -> list[dict[str, Any]]:
    """Each step's first record that names it (a read that is kept is logged once, committed)."""
    return [r["body"] for r in wal.records() if r["type"] in ("STEP_INTENT", "STEP_COMMITTED") and "tool" in r["body"]]


# -- wrap_tool ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [{"amount": 5, "currency": "EUR"}, {}], ids=["made-up", "left-out"])
def test_a_call_the_function_cannot_take_is_not_applied_and_never_reaches_it(
        adapter: Gadgets, arguments: dict[str, Any]) -> None:
    safe = adapter.wrap_tool(Gadget("charge", "Charge the card.", charge), semantics="COMPENSABLE", compensate=refund)
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal):
        Runtime().call(safe, **arguments)
    assert aborted.value.report.clean and calls_seen == []
    assert "does not fit its parameters" in str(aborted.value.cause)
    assert [r["type"] for r in wal.records() if r.get("step") == 1][-1] == "STEP_NOT_APPLIED"


def test_a_type_error_from_the_function_body_stays_unknown(adapter: Gadgets) -> None:
    # Raised after the arguments were bound: the body ran, and may have acted before it raised.
    def charge_then_fail(amount: int) -> None:
        calls_seen.append(("charge", amount))
        raise TypeError("the card processor's client broke")

    safe = adapter.wrap_tool(Gadget("charge", "Charge.", charge_then_fail), semantics="COMPENSABLE", compensate=refund)
    with pytest.raises(SagaAborted) as aborted, saga_scope(MemoryWAL()):
        Runtime().call(safe, amount=5)
    assert not aborted.value.report.clean and calls_seen == [("charge", 5)]


def test_a_decorated_function_is_checked_against_what_the_decorator_takes(adapter: Gadgets) -> None:
    # A decorator (functools.wraps) that fills a parameter itself takes a call the function alone would not.
    def with_currency(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def decorated(*args: Any, currency: str = "EUR", **kwargs: Any) -> Any:
            calls_seen.append(("currency", currency))
            return fn(*args, **kwargs)
        return decorated

    @with_currency
    def pay(amount: int) -> dict[str, Any]:
        return {"id": f"ch_{amount}"}

    safe = adapter.wrap_tool(Gadget("pay", "Pay.", pay), semantics="COMPENSABLE", compensate=refund)
    with pytest.raises(SagaAborted) as aborted, saga_scope(MemoryWAL()):
        Runtime().call(safe, amount=5, currency="USD")
        raise RuntimeError("later failure")
    assert aborted.value.report.clean and calls_seen == [("currency", "USD"), ("refund", "ch_5")]


async def test_an_async_function_is_checked_the_same_way(adapter: Gadgets) -> None:
    safe = adapter.wrap_tool(Gadget("acharge", "Charge.", acharge), semantics="COMPENSABLE", compensate=refund)
    assert inspect.iscoroutinefunction(safe.fn)
    with pytest.raises(SagaAborted) as aborted:
        async with saga_scope(MemoryWAL()):
            await safe.fn(amount=5, ctx=RunContext(), currency="EUR")
    assert aborted.value.report.clean and calls_seen == []



def test_wrap_tool_keeps_the_type_and_name_and_makes_every_call_a_step(adapter: Gadgets) -> None:
    gadget = Gadget("charge", "Charge the card.", charge)
    safe = adapter.wrap_tool(gadget, semantics="COMPENSABLE", compensate=refund)
    assert type(safe) is Gadget and safe is not gadget
    assert (safe.name, safe.description) == (gadget.name, gadget.description)
    runtime, wal = Runtime(), MemoryWAL()
    with pytest.raises(SagaAborted), saga_scope(wal):
        runtime.call(safe, amount=5)
        raise RuntimeError("later failure")
    key = calls_seen[0][1][2]
    assert calls_seen == [("charge", (5, "RunContext", key)), ("refund", "ch_5")]
    intent = _steps(wal)[0]
    assert intent["tool"] == "charge" and intent["op"] == key  # the step's key reached the function
    # The framework's context reached the function but not the log.
    assert intent["args"] == {"amount": 5}
    assert adapter.spec_of(safe).options.origin == "gadgets"  # type: ignore[union-attr]
    calls_seen.clear()
    assert runtime.call(safe, amount=1) == {"id": "ch_1"}  # outside a saga: straight through
    assert calls_seen == [("charge", (1, "RunContext", None))]


def test_an_async_function_stays_async_and_is_a_step(adapter: Gadgets) -> None:
    safe = adapter.wrap_tool(Gadget("acharge", "Charge.", acharge), semantics="COMPENSABLE", compensate=refund)
    assert inspect.iscoroutinefunction(safe.fn)
    wal = MemoryWAL()

    async def main() -> None:
        async with saga_scope(wal):
            await safe.fn(amount=3, ctx=RunContext())

    asyncio.run(main())
    assert calls_seen == [("acharge", (3, "RunContext"))]
    assert _steps(wal)[0]["args"] == {"amount": 3}


def test_wrap_tool_refuses_what_it_cannot_do_and_says_how_to_fix_it(adapter: Gadgets) -> None:
    gadget = Gadget("charge", "Charge.", charge)
    with pytest.raises(TypeError, match=r"agent-saga-gadgets's wrap_tool takes .*Gadget, got builtins.object; make one"):
        adapter.wrap_tool(object(), semantics="REVERSIBLE")
    safe = adapter.wrap_tool(gadget, semantics="REVERSIBLE")
    with pytest.raises(ValueError, match="'charge' is already wrapped; wrap the original tool once"):
        adapter.wrap_tool(safe, semantics="REVERSIBLE")
    with pytest.raises(ConfigurationError, match="needs semantics"):
        adapter.wrap_tool(gadget)
    with pytest.raises(ConfigurationError, match=r"unknown step option\(s\) \['retries'\]"):
        adapter.wrap_tool(gadget, semantics="REVERSIBLE", retries=3)  # type: ignore[call-arg]


def test_wrap_tool_takes_every_step_option_and_a_name(adapter: Gadgets) -> None:
    values: dict[str, Any] = {
        "compensate": Compensation(fn=lambda: None), "retry": RetryPolicy(max_attempts=2, base_delay=0),
        "timeout": 5.0, "fallback_action": charge, "inline": True, "require_boundary": True,
        "policy_args": {"spend": "$.amount"}, "reveal": frozenset({"token"}), "wait_for_commit": True,
        "origin": "probe", "reconcile": ReconcilePolicy(delay=0, attempts=1), "record_result": "none",
        "not_applied_on": (LookupError,),
    }
    assert set(values) == option_names()
    safe = adapter.wrap_tool(Gadget("charge", "Charge.", charge), semantics="COMPENSABLE", name="billing.charge", **values)
    spec = adapter.spec_of(safe)
    assert spec is not None and spec.name == "billing.charge"
    assert {k: getattr(spec.options, k) for k in values} == values
    # ... or as one StepOptions; the adapter's framework is the origin unless one is given.
    ready = adapter.wrap_tool(Gadget("c2", "C.", charge), options=StepOptions("REVERSIBLE", timeout=2.0))
    assert adapter.spec_of(ready) == ToolSpec("c2", StepOptions("REVERSIBLE", timeout=2.0, origin="gadgets"))
    # The signature names the logged arguments, without what the framework fills.
    assert list(spec.signature.parameters) == ["amount", "idempotency_key"]  # type: ignore[union-attr]


# -- hooks, patching, boundary --------------------------------------------------------------------


def test_the_generated_hook_wraps_its_own_type_and_answers_none_for_others(adapter: Gadgets) -> None:
    plugins().register(adapter, "gadgets")
    safe = agent_saga.wrap_tool(Gadget("charge", "Charge.", charge), semantics="REVERSIBLE", name="c")
    assert type(safe) is Gadget and adapter.spec_of(safe) == ToolSpec("c", StepOptions("REVERSIBLE", origin="gadgets"))
    assert plugins().wrap_tool(object(), StepOptions("REVERSIBLE")) is None


def test_patching_is_bookkept_and_a_wrapped_tool_is_left_alone(adapter: Gadgets) -> None:
    from agent_saga.plugins.patching import PatchConfig

    original = Runtime.__dict__["call"]
    plugins().register(adapter, "gadgets")
    first = plugins().patch("gadgets", PatchConfig())
    assert first == [f"{__name__}.Runtime.call"]
    assert plugins().patch("gadgets", PatchConfig()) == first  # again: nothing patched twice
    assert Runtime.__dict__["call"] is not original
    try:
        wal = MemoryWAL()
        safe = adapter.wrap_tool(Gadget("charge", "Charge.", charge), semantics="REVERSIBLE")
        with saga_scope(wal):
            Runtime().call(safe, amount=2)
        assert [i["tool"] for i in _steps(wal)] == ["charge"]  # one step, not one per layer
    finally:
        assert plugins().unpatch("gadgets") == first
    assert Runtime.__dict__["call"] is original


def test_the_run_boundary_passes_gate_and_tags_joins_and_fails_a_swallowed_failure(adapter: Gadgets) -> None:
    gate = PreFlightGate(rules=[Rule("no-big-charges", tool_is("charge") & arg_exceeds("amount", 100), "block")])
    safe = adapter.wrap_tool(Gadget("charge", "Charge.", charge), semantics="COMPENSABLE", compensate=refund)
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as caught, adapter.boundary(wal, gate=gate, tags=["nightly"]):
        Runtime().call(safe, amount=500)
    assert isinstance(caught.value.cause, StepRefused) and calls_seen == []  # the gate it was given refused
    start = next(r for r in wal.records() if r["type"] == "SAGA_STARTED")
    assert start["body"]["name"] == "gadgets" and start["body"]["tags"] == ["nightly"]

    def broken(amount: int) -> None:
        raise RuntimeError("card declined")

    def swallowing(gadget: Gadget) -> str:
        try:
            Runtime().call(gadget, amount=1)
        except RuntimeError as err:
            return f"error: {err}"  # what a framework does with a tool's exception
        return "ok"

    failing = adapter.wrap_tool(Gadget("broken", "B.", broken), semantics="IRREVERSIBLE")
    with pytest.raises(SagaAborted) as caught, saga_scope(wal) as outer:
        with adapter.boundary() as inner:  # joins the open saga
            assert inner.saga is outer.saga
            assert swallowing(failing) == "error: card declined"
    assert isinstance(caught.value.cause, ToolFailed) and str(caught.value.cause.cause) == "card declined"


# -- framework-only arguments: kept out of the log, passed to the function ------------------------

_KINDS = ("po", "pk", "ko")


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, frozenset[str], tuple[Any, ...], dict[str, Any]]:
    """A function signature, which of its parameters the framework fills, and a call of it."""
    names = draw(st.lists(st.sampled_from("abcdef"), unique=True, max_size=6))
    kinds = sorted((draw(st.sampled_from(_KINDS)) for _ in names), key=_KINDS.index)
    params = list(zip(names, kinds, strict=True))
    star, starstar = draw(st.booleans()), draw(st.booleans())
    hidden = frozenset(draw(st.sets(st.sampled_from(names)))) if names else frozenset()
    po = [n for n, k in params if k == "po"]
    pk = [n for n, k in params if k == "pk"]
    ko = [n for n, k in params if k == "ko"]
    parts = [*po, *(["/"] if po else []), *pk, *(["*rest"] if star else (["*"] if ko else [])), *ko]
    parts += ["**extra"] if starstar else []
    source = f"def f({', '.join(parts)}):\n    return dict(locals())\n"
    cut = draw(st.integers(0, len(pk)))
    values = {n: i for i, n in enumerate(names)}
    args = tuple(values[n] for n in [*po, *pk[:cut]])
    if star and cut == len(pk):
        args += tuple(draw(st.lists(st.integers(100, 110), max_size=2)))
    kwargs = {n: values[n] for n in [*pk[cut:], *ko]}
    if starstar:
        kwargs.update({f"x{i}": i for i in range(draw(st.integers(0, 2)))})
    return source, hidden, args, kwargs


@pytest.mark.slow  # heavy (many examples or shapes): left to the full core env
@settings(max_examples=examples(200), deadline=None)
@given(calls())
def test_framework_arguments_reach_the_function_however_passed_and_never_the_log(
    case: tuple[str, frozenset[str], tuple[Any, ...], dict[str, Any]],
) -> None:
    source, hidden, args, kwargs = case
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    fn = namespace["f"]
    direct = fn(*args, **kwargs)
    split = hold_back(fn, hidden)
    if split is not None:
        forward, kept_args, kept_kwargs = split(args, dict(kwargs))
        assert forward(*kept_args, **kept_kwargs) == direct
    spec = ToolSpec.of("f", semantics="REVERSIBLE", signature=signature_of(fn, without=hidden))
    step = spec.wrap(fn, hidden=hidden)
    assert step(*args, **kwargs) == direct  # outside a saga
    wal = MemoryWAL()
    with saga_scope(wal):
        assert step(*args, **kwargs) == direct
    logged = _steps(wal)[0]["args"]
    assert not set(logged) & hidden
    passed = set(inspect.signature(fn).bind(*args, **kwargs).arguments) - hidden - {"rest", "extra"}
    assert passed <= set(logged)


# -- require_framework, and the top-level wrap_tool finding an installed adapter ---------------

GADGETS = '''
import dataclasses, inspect
from agent_saga.adapter import Adapter, require_framework

require_framework("agent-saga-gadgets", "gadgets")

@dataclasses.dataclass(frozen=True)
class Gadget:
    name: str
    fn: object

class Runtime:
    def call(self, gadget, **arguments):
        return gadget.fn(**arguments)

class Gadgets(Adapter):
    framework = "gadgets"
    distribution = "agent-saga-gadgets"
    tool_types = (Gadget,)

    def function_of(self, tool):
        return tool.fn

    def wrap_with_spec(self, tool, spec):
        return dataclasses.replace(tool, fn=self.step(spec, tool.fn))

    def patch(self):
        def make(original):
            def call(runtime, gadget, **arguments):
                return self.patched_sync(gadget, lambda: original(runtime, gadget, **arguments), arguments)
            return call
        self.patches.apply(Runtime, "call", make)

adapter = Gadgets()
'''


@pytest.fixture
def site(tmp_path: Path) -> Path:
    install_adapter(tmp_path, "gadgets", "pluggy>=1.0", "demo_gadgets", GADGETS, "demo_gadgets:adapter")
    install_adapter(tmp_path, "toonew", "pluggy>=99", "demo_toonew", "class Widget:\n    name = 'w'\n")
    return tmp_path


@pytest.mark.slow
def test_top_level_wrap_tool_loads_the_installed_adapter_that_knows_the_tool(site: Path) -> None:
    out = run_with(site, """
        import json, sys
        import agent_saga
        from agent_saga import MemoryWAL, saga_scope
        from demo_gadgets import Gadget, Runtime
        seen = []
        safe = agent_saga.wrap_tool(Gadget("pay", lambda amount: seen.append(amount) or {"id": 1}),
                                    semantics="REVERSIBLE")
        wal = MemoryWAL()
        report = agent_saga.patch_all({"mode": "enforce", "tools": {}}, only=["gadgets"])
        with saga_scope(wal):
            Runtime().call(safe, amount=9)   # wrapped: one step, not refused by enforce mode
            try:
                Runtime().call(Gadget("raw", lambda: 1))
            except agent_saga.StepRefused as err:
                refused = err.rule
        try:
            agent_saga.wrap_tool(object(), semantics="REVERSIBLE")
        except TypeError as err:
            unknown = str(err)
        print(json.dumps({
            "type": type(safe).__name__, "seen": seen, "refused": refused, "patched": report.to_dict()["patched"],
            "steps": [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_COMMITTED"],
            "toonew_imported": "demo_toonew" in sys.modules, "unknown": unknown,
        }))
    """)
    assert out["type"] == "Gadget" and out["seen"] == [9] and out["steps"] == ["pay"]
    assert out["refused"] == "policy.unclassified"
    assert out["patched"] == {"gadgets": ["demo_gadgets.Runtime.call"]}
    assert out["toonew_imported"] is False  # out of range: never imported
    # Loaded: gadgets, beside any plugin this environment installs (the core's own `openai`, with its extra).
    loaded = re.search(r"no installed adapter recognises builtins\.object \(adapters loaded: ([^)]*)\)", out["unknown"])
    assert loaded is not None and "gadgets" in loaded.group(1).split(", ")
    assert "toonew did not load: pluggy" in out["unknown"] and "outside the supported range pluggy>=99" in out["unknown"]


def test_a_namespace_package_framework_is_named_by_its_first_two_module_parts() -> None:
    # google-adk lives in the `google` namespace, with protobuf, genai and the rest: its tools
    # name the ADK adapter, and nothing else under `google` does.
    Adk = type("FunctionTool", (), {"__module__": "google.adk.tools.function_tool"})
    with pytest.raises(TypeError, match=r"google\.adk\.tools\.function_tool\.FunctionTool is a google\.adk tool: "
                                        r"install its adapter with: pip install 'agent-saga-google-adk\[google-adk\]>=3\.0\.0'"):
        agent_saga.wrap_tool(Adk(), semantics="REVERSIBLE")
    Proto = type("Message", (), {"__module__": "google.protobuf.message"})
    with pytest.raises(TypeError, match=r"^no installed adapter recognises google\.protobuf\.message\.Message"):
        agent_saga.wrap_tool(Proto(), semantics="REVERSIBLE")


def test_an_agno_tool_without_its_adapter_names_agent_saga_agno() -> None:
    Function = type("Function", (), {"__module__": "agno.tools.function"})
    with pytest.raises(TypeError, match=r"agno\.tools\.function\.Function is a agno tool: "
                                        r"install its adapter with: pip install 'agent-saga-agno\[agno\]>=3\.0\.0'"):
        agent_saga.wrap_tool(Function(), semantics="REVERSIBLE")


def test_a_tool_of_a_known_framework_without_its_adapter_names_the_distribution_to_install() -> None:
    Foreign = type("StructuredTool", (), {"__module__": "langchain_core.tools.structured"})
    with pytest.raises(TypeError, match=r"pip install 'agent-saga-langgraph\[langgraph\]>=3\.0\.0'"):
        agent_saga.wrap_tool(Foreign(), semantics="REVERSIBLE")
    Sub = type("MyTool", (Foreign,), {"__module__": "myapp.tools"})  # a user's subclass: its base decides
    with pytest.raises(TypeError, match=r"pip install 'agent-saga-langgraph\[langgraph\]>=3\.0\.0'"):
        agent_saga.wrap_tool(Sub(), semantics="REVERSIBLE")
    with pytest.raises(TypeError, match=r"plain function.*@agent_saga.tool\(semantics=...\)"):
        agent_saga.wrap_tool(charge, semantics="REVERSIBLE")
    with pytest.raises(ConfigurationError, match="needs semantics"):  # bad options fail first
        agent_saga.wrap_tool(Foreign())


def test_require_framework_reads_the_range_from_metadata(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(site))
    assert require_framework("agent-saga-gadgets", "gadgets").startswith("pluggy ")
    with pytest.raises(FrameworkUnsupported) as caught:
        require_framework("agent-saga-toonew", "toonew")
    message = str(caught.value)
    assert message.startswith("agent-saga-toonew supports pluggy>=99 (installed: pluggy ")
    assert "is outside the supported range pluggy>=99" in message
    assert message.endswith("pip install 'agent-saga-toonew[toonew]>=3.0.0'")
    assert isinstance(caught.value, ImportError) and caught.value.name == "agent_saga_toonew"
    with pytest.raises(FrameworkUnsupported, match="agent-saga-nothing itself is not installed"):
        require_framework("agent-saga-nothing", "nothing")


def test_check_compat_raises_naming_what_moved_when_the_probe_says_no_or_fails(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga.adapter import check_compat

    monkeypatch.syspath_prepend(str(site))
    check_compat("agent-saga-gadgets", "gadgets", lambda: True, "never said")
    for fits in (lambda: False, lambda: object().renamed, lambda: len(1)):  # no, AttributeError, TypeError
        with pytest.raises(FrameworkUnsupported) as caught:
            check_compat("agent-saga-gadgets", "gadgets", fits, "Runner.call_tool is gone")
        message = str(caught.value)
        assert message.startswith("agent-saga-gadgets supports pluggy")
        assert "; Runner.call_tool is gone. Install a supported version with: pip install 'agent-saga-gadgets[gadgets]>=3.0.0'" in message
    with pytest.raises(ZeroDivisionError):  # anything else is a bug in the probe, not a moved framework
        check_compat("agent-saga-gadgets", "gadgets", lambda: bool(1 / 0), "moved")


def test_the_kit_is_one_pinned_public_module() -> None:
    import agent_saga.adapter as kit

    assert set(kit.__all__) == {
        "SPEC_ATTR", "Adapter", "FrameworkUnsupported", "Patches", "SagaKwargs", "SagaOptions", "StepKwargs",
        "StepOptions", "ToolSpec", "carry", "check_compat", "require_framework", "signature_of", "split_saga_options",
    }
    assert all(hasattr(kit, name) for name in kit.__all__)


@pytest.mark.parametrize(("module", "install"), [
    ("pydantic_ai.tools", "pip install 'agent-saga-pydantic-ai[pydantic-ai]>=3.0.0'"),
    ("strands.tools.decorator", "pip install 'agent-saga-strands[strands]>=3.0.0'"),
])
def test_a_pydantic_ai_or_strands_tool_without_its_adapter_names_the_distribution(module: str, install: str) -> None:
    Foreign = type("Tool", (), {"__module__": module})
    with pytest.raises(TypeError, match=re.escape(install)):
        agent_saga.wrap_tool(Foreign(), semantics="REVERSIBLE")


_ADAPTERS = sorted(p for p in Path(__file__).resolve().parents[2].glob("adapter-*") if p.name != "adapter-mcp")


@pytest.mark.parametrize("package", _ADAPTERS, ids=[p.name for p in _ADAPTERS])
def test_every_adapter_checks_its_framework_one_way_and_tests_it_one_way(package: Path) -> None:
    """One ``_compat`` idiom: a module-level ``check_compat(distribution, extra, _fits, problem)``,
    no hand-raised FrameworkUnsupported, and the same moved-framework test in the adapter's tests.
    (mcp has no framework loop to adapt: its compat.py bridges mcp 1.x and 2.x, both supported.)"""
    compat = next(package.glob("src/*/_compat.py"), None)
    assert compat is not None, f"{package.name} has no _compat.py: every framework adapter checks its framework there"
    tree = ast.parse(compat.read_text())
    calls = [
        node.value for node in tree.body
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name) and node.value.func.id == "check_compat"
    ]
    assert len(calls) == 1, f"{compat}: one module-level check_compat(...) call"
    distribution = package.name.replace("adapter-", "agent-saga-")
    assert [ast.literal_eval(a) for a in calls[0].args[:2]] == [distribution, _extra(package)], compat
    assert "FrameworkUnsupported" not in compat.read_text(), f"{compat}: let check_compat raise it"
    tests = "".join(p.read_text() for p in package.glob("tests/test_*.py"))
    assert re.search(r"def test_an_install_whose_\w+_moved_fails_at_import_naming_the_supported_range", tests), (
        f"{package.name}'s tests pin the moved-framework error (see test_langgraph_compat.py)"
    )


def test_every_framework_adapter_is_checked() -> None:
    names = {p.name for p in _ADAPTERS}
    assert {f"adapter-{n}" for n in ("ag2", "agno", "autogen", "crewai", "google-adk", "langgraph", "llamaindex",
                                     "openai-agents", "pydantic-ai", "semantic-kernel", "strands", "vertex")} <= names


def _extra(package: Path) -> str:
    pyproject = (package / "pyproject.toml").read_text()
    (extra,) = re.findall(r'^\[project\.entry-points\.agent_saga_adapters\]\n(\w+) = ', pyproject, re.M)
    return extra
