"""patch_all(): adapters found by entry point, checked from metadata before import.

The adapters here are real installed distributions (a dist-info directory and a
module on sys.path), each run in a fresh interpreter so that nothing leaks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from installed import install_adapter, run_with

PLUGIN = '''
import json, os
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_sync

class Runtime:
    def call_tool(self, name, fn, **kw):
        return fn(**kw)

_patches = Patches()

def _wrap(original):
    def call_tool(self, name, fn, **kw):
        return patched_sync(name, "{key}", id(self), lambda: original(self, name, fn, **kw), kw)
    return call_tool

@hookimpl
def agent_saga_patch(config):
    _patches.apply(Runtime, "call_tool", _wrap)
    return _patches.targets()

@hookimpl
def agent_saga_unpatch():
    return _patches.revert()
'''


def _install(site: Path, key: str, requires: str) -> None:
    install_adapter(site, key, requires, f"demo_{key}", PLUGIN.replace("{key}", key))


REPORT = """
import json, sys
import agent_saga
# Only the adapters made here: others installed in this environment are not the subject.
report = agent_saga.patch_all(only=["inrange", "missing", "toonew"])
print(json.dumps({"report": report.to_dict(),
                  "imported": sorted(m for m in sys.modules if m.startswith("demo_"))}))
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    _install(tmp_path, "inrange", "pluggy>=1.0")
    _install(tmp_path, "missing", "no-such-framework-agent-saga>=1.0")
    _install(tmp_path, "toonew", "pluggy>=99")
    return tmp_path


@pytest.mark.slow
def test_only_adapters_whose_framework_is_installed_in_range_are_imported(site: Path) -> None:
    out = run_with(site, REPORT)
    report = out["report"]
    assert isinstance(report, dict)
    assert list(report["patched"]) == ["inrange"]
    assert report["patched"]["inrange"] == ["demo_inrange.Runtime.call_tool"]
    assert report["skipped"]["missing"] == "no-such-framework-agent-saga is not installed"
    assert "outside the supported range pluggy>=99" in report["skipped"]["toonew"]
    assert out["imported"] == ["demo_inrange"]  # the others were never imported


@pytest.mark.slow
def test_disabled_adapters_are_neither_imported_nor_patched(site: Path) -> None:
    out = run_with(site, REPORT, {"AGENT_SAGA_DISABLED_ADAPTERS": "inrange, other"})
    assert out["imported"] == []
    assert out["report"]["patched"] == {}  # type: ignore[index]
    assert out["report"]["skipped"]["inrange"] == "disabled by $AGENT_SAGA_DISABLED_ADAPTERS"  # type: ignore[index]


@pytest.mark.slow
def test_patched_calls_follow_the_policy_and_unpatch_restores_the_original(site: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "tools": {"read": {"semantics": "REVERSIBLE"}}}))
    out = run_with(site, """
        import json
        import agent_saga
        from agent_saga import MemoryWAL, saga_scope
        from agent_saga.plugins import ToolNotClassified
        import demo_inrange
        original = demo_inrange.Runtime.__dict__["call_tool"]
        first = agent_saga.patch_all(only=["inrange"])
        again = agent_saga.patch_all(only=["inrange"])
        rt, wal, ran = demo_inrange.Runtime(), MemoryWAL(), []
        outside = rt.call_tool("write", lambda: ran.append("outside") or 1)
        with saga_scope(wal):
            rt.call_tool("read", lambda q: ran.append("read") or q, q=7)
            try:
                rt.call_tool("write", lambda: ran.append("write"))
            except ToolNotClassified as err:
                refused = err.rule
        steps = [r["body"].get("tool") for r in wal.records() if r["type"] == "STEP_COMMITTED"]
        removed = agent_saga.unpatch_all()
        print(json.dumps({"same": first.patched == again.patched, "ran": ran, "steps": steps,
                          "refused": refused, "removed": removed,
                          "restored": demo_inrange.Runtime.__dict__["call_tool"] is original}))
    """, {"AGENT_SAGA_POLICY": str(policy)})
    assert out == {
        "same": True, "ran": ["outside", "read"], "steps": ["read"], "refused": "policy.unclassified",
        "removed": {"inrange": ["demo_inrange.Runtime.call_tool"]}, "restored": True,
    }


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["enforce", "observe"])
def test_an_enforced_policy_says_once_that_a_call_outside_every_saga_is_unprotected(
    site: Path, tmp_path: Path, mode: str,
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": mode, "tools": {"read": {"semantics": "REVERSIBLE"}}}))
    out = run_with(site, """
        import json, warnings
        import agent_saga
        from agent_saga import MemoryWAL, saga_scope
        import demo_inrange
        agent_saga.patch_all(only=["inrange"])
        rt = demo_inrange.Runtime()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ran = [rt.call_tool("write", lambda: "w"), rt.call_tool("read", lambda: "r")]
            with saga_scope(MemoryWAL()):
                rt.call_tool("read", lambda: "r")
        print(json.dumps({"ran": ran, "said": [str(w.message) for w in caught if w.category is RuntimeWarning]}))
    """, {"AGENT_SAGA_POLICY": str(policy)})
    assert out["ran"] == ["w", "r"]  # outside a saga the calls still run: nothing to roll them into
    if mode == "observe":
        assert out["said"] == []  # observe mode promises nothing outside a saga either
        return
    assert out["said"] == [  # once, for the first call, with the run helper named
        "agent-saga: patch_all() enforces its policy inside a saga only; inrange ran 'write' outside every saga, "
        "unprotected. Run the agent through its run helper (saga_run from agent_saga.adapters.inrange) or inside "
        "saga_scope() (said once per patch_all())"
    ]


@pytest.mark.slow
def test_a_patched_call_is_undone_with_its_own_arguments(site: Path, tmp_path: Path) -> None:
    # The tool answers with a sentence: only its arguments say what to undo.
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "tools": {"book": {"semantics": "COMPENSABLE", "compensate": {
        "handler": "demo.cancel", "args": {"seats": ["$args.seat"], "flight": "$args.flight"}}}}}))
    out = run_with(site, """
        import json
        import agent_saga
        from agent_saga import MemoryWAL, SagaAborted, compensator, saga_scope
        import demo_inrange
        cancelled = []
        compensator("demo.cancel")(lambda seats, flight: cancelled.append([seats, flight]))
        agent_saga.patch_all(only=["inrange"])
        rt = demo_inrange.Runtime()
        try:
            with saga_scope(MemoryWAL()):
                said = rt.call_tool("book", lambda seat, flight: f"booked {seat}", seat="12A", flight="LH400")
                raise RuntimeError("the next step failed")
        except SagaAborted as aborted:
            clean = aborted.report.clean
        print(json.dumps({"said": said, "cancelled": cancelled, "clean": clean}))
    """, {"AGENT_SAGA_POLICY": str(policy)})
    assert out == {"said": "booked 12A", "cancelled": [[["12A"], "LH400"]], "clean": True}


@pytest.mark.slow
def test_importing_agent_saga_imports_neither_pluggy_nor_pytest() -> None:
    code = """
        import json, sys
        import agent_saga, agent_saga.fleet, agent_saga.plugins
        light = {"pluggy": "pluggy" in sys.modules, "pytest": "pytest" in sys.modules}
        import agent_saga.testing
        print(json.dumps({**light, "pytest_after_testing": "pytest" in sys.modules}))
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"pluggy": False, "pytest": False, "pytest_after_testing": True}


def test_a_missing_adapter_names_the_distribution_to_install() -> None:
    with pytest.raises(ModuleNotFoundError, match=re.escape("pip install 'agent-saga-no-such-fw>=3.0.0'")):
        __import__("agent_saga.adapters.no_such_fw")


BROKEN = '''
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.patching import Patches
import demo_inrange

_patches = Patches()

@hookimpl
def agent_saga_patch(config):
    # Patches one thing, then fails half-way: that one thing must be taken back.
    _patches.apply(demo_inrange.Runtime, "call_tool", lambda original: lambda *a, **k: "HIJACKED")
    raise RuntimeError("framework moved its internals")

@hookimpl
def agent_saga_unpatch():
    return _patches.revert()
'''


@pytest.mark.slow
def test_an_adapter_that_fails_is_reported_and_leaves_no_patch_while_the_others_proceed(site: Path) -> None:
    (site / "demo_broken.py").write_text(BROKEN)
    (site / "demo_badimport.py").write_text("raise ImportError('half-installed')\n")
    for key in ("broken", "badimport"):
        install_adapter(site, key, "pluggy>=1.0", f"demo_{key}", None)
    out = run_with(site, """
        import json
        import agent_saga, demo_inrange
        original = demo_inrange.Runtime.__dict__["call_tool"]
        report = agent_saga.patch_all(only=["badimport", "broken", "inrange"])
        patched = demo_inrange.Runtime.__dict__["call_tool"]
        print(json.dumps({"report": report.to_dict(), "inrange_is_ours": patched is not original
                          and patched(demo_inrange.Runtime(), "x", lambda: 5) == 5}))
    """)
    report = out["report"]
    assert isinstance(report, dict)
    assert list(report["patched"]) == ["inrange"]  # the good adapter still ran
    assert report["failed"]["broken"] == "RuntimeError: framework moved its internals"
    assert report["failed"]["badimport"] == "ImportError: half-installed"
    assert out["inrange_is_ours"]  # broken's half-applied "HIJACKED" patch was taken back


WARNS = """
import json, warnings
import agent_saga
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    agent_saga.patch_all(only=["inrange"]{policy})
print(json.dumps([str(w.message) for w in caught if w.category is UserWarning]))
"""


@pytest.mark.slow
def test_patch_all_without_a_policy_warns_when_called_naming_what_it_protects(site: Path) -> None:
    out = run_with(site, WARNS.replace("{policy}", ""))
    assert isinstance(out, list) and len(out) == 1
    message = out[0]
    assert message.startswith("patch_all() without a tool policy: in inrange, only tools made with wrap_tool")
    assert "runs unprotected" in message and "unclassified_calls()" in message  # what it will not do
    assert "Pass a policy" in message  # and how to change that


@pytest.mark.slow
@pytest.mark.parametrize("policy", [', policy={"mode": "observe", "tools": {}}', ""])
def test_patch_all_with_a_policy_says_nothing(site: Path, tmp_path: Path, policy: str) -> None:
    file = tmp_path / "policy.json"
    file.write_text('{"mode": "enforce", "tools": {}}')
    env = {} if policy else {"AGENT_SAGA_POLICY": str(file)}  # the environment's policy counts as one
    assert run_with(site, WARNS.replace("{policy}", policy), env) == []


def test_a_module_level_function_patched_is_named_by_its_module_and_restored() -> None:
    # A framework that calls a tool through a module's function (google-genai's AFC) is
    # patched on the module: the report names it like a class method, not by the module's repr.
    import types

    from agent_saga.plugins.patching import Patches

    module = types.ModuleType("framework.calling")
    module.invoke = lambda fn: fn()
    original = module.invoke
    patches = Patches()
    patches.apply(module, "invoke", lambda was: lambda fn: ("policed", was(fn)))
    assert patches.targets() == ["framework.calling.invoke"]
    assert module.invoke(lambda: 1) == ("policed", 1)
    assert patches.revert() == ["framework.calling.invoke"]
    assert module.invoke is original
