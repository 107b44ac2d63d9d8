"""Wheels, not the work tree: build the core and every adapter, install them in a fresh
virtual environment, and check what a user gets.

1. Adapters installed, no framework: both import paths fail with an ImportError that
   says what to install, and ``patch_all()`` patches nothing and imports no adapter module.
2. LangGraph added: ``agent_saga.adapters.langgraph`` *is* ``agent_saga_langgraph``, and
   ``patch_all()`` patches exactly that framework.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {
    "core": "agent_saga",
    "adapter-langgraph": "agent_saga_langgraph",
    "adapter-openai-agents": "agent_saga_openai_agents",
    "adapter-llamaindex": "agent_saga_llamaindex",
    "adapter-crewai": "agent_saga_crewai",
    "adapter-autogen": "agent_saga_autogen",
    "adapter-semantic-kernel": "agent_saga_semantic_kernel",
    "adapter-ag2": "agent_saga_ag2",
    "adapter-mcp": "agent_saga_mcp",  # depends on the MCP SDK itself: it is the proxy too
}
# Adapters whose framework is an extra, and so is absent after a plain install.
WITH_EXTRA = ("langgraph", "openai_agents", "llamaindex", "crewai", "autogen", "semantic_kernel", "ag2")

pytestmark = pytest.mark.slow


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        pytest.fail("the packaging test needs `uv` (pip install uv); tox's packaging env installs it")
    return found


def _sh(*cmd: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "AGENT_SAGA", "UV_PROJECT"))}
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    uv = _uv()
    wheels = tmp_path_factory.mktemp("wheels")
    for folder in DISTRIBUTIONS:
        _sh(uv, "build", "--wheel", "--out-dir", str(wheels), str(ROOT / "packages" / folder))
    env = tmp_path_factory.mktemp("venv") / "env"
    _sh(uv, "venv", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(env))
    python = env / "bin" / "python"
    built = sorted(str(w) for w in wheels.glob("*.whl"))
    assert len(built) == len(DISTRIBUTIONS), built
    _sh(uv, "pip", "install", "--python", str(python), "--find-links", str(wheels), *built)
    return python, wheels


def _py(python: Path, code: str) -> dict[str, object]:
    out = _sh(str(python), "-c", textwrap.dedent(code), cwd=python.parent)
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


PROBE = """
import json, sys
import agent_saga
before = set(sys.modules)
report = agent_saga.patch_all().to_dict()
adapters_imported = sorted(m for m in sys.modules if m.startswith("agent_saga_"))
errors = {}
for name in ("langgraph", "openai_agents", "llamaindex", "crewai", "autogen", "semantic_kernel", "ag2", "vertex"):
    try:
        __import__("agent_saga.adapters." + name)
        errors[name] = None
    except ImportError as err:
        errors[name] = str(err)
from agent_saga.plugins import policy_schema
print(json.dumps({"report": report, "imported": adapters_imported, "errors": errors,
                  "site": agent_saga.__file__, "schema": policy_schema()["title"],
                  "pluggy_before_patch_all": "pluggy" in before}))
"""


def test_wheels_without_frameworks_patch_nothing_and_import_no_adapter(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    out = _py(python, PROBE)
    assert str(out["site"]).startswith(str(python.parents[1]))  # the wheel, not the work tree
    report = out["report"]
    assert isinstance(report, dict)
    assert report["patched"] == {}
    skipped = report["skipped"]
    assert sorted(skipped) == sorted(WITH_EXTRA)
    assert skipped["langgraph"] in ("langgraph is not installed", "langchain-core is not installed")
    assert skipped["llamaindex"] == "llama-index-core is not installed"
    assert skipped["openai_agents"] == "openai-agents is not installed"
    assert skipped["crewai"] == "crewai is not installed"
    assert skipped["autogen"] == "autogen-core is not installed"
    assert skipped["semantic_kernel"] == "semantic-kernel is not installed"
    assert skipped["ag2"] == "ag2 is not installed"
    assert out["imported"] == []
    assert out["pluggy_before_patch_all"] is False
    assert out["schema"] == "agent-saga tool policy"  # the JSON Schema ships in the core wheel
    errors = out["errors"]
    assert isinstance(errors, dict)
    assert "pip install 'agent-saga-langgraph[langgraph]'" in errors["langgraph"]
    assert "pip install 'agent-saga-openai-agents[openai_agents]'" in errors["openai_agents"]
    assert "pip install 'agent-saga-llamaindex[llamaindex]'" in errors["llamaindex"]
    assert "pip install 'agent-saga-crewai[crewai]'" in errors["crewai"]
    assert "pip install 'agent-saga-autogen[autogen]'" in errors["autogen"]
    assert "pip install 'agent-saga-semantic-kernel[semantic_kernel]'" in errors["semantic_kernel"]
    assert "pip install 'agent-saga-ag2[ag2]'" in errors["ag2"]
    assert "pip install agent-saga-vertex" in errors["vertex"]  # no such distribution installed


def test_with_langgraph_installed_both_import_paths_work_and_only_it_is_patched(venv: tuple[Path, Path]) -> None:
    python, wheels = venv
    _sh(_uv(), "pip", "install", "--python", str(python), "--find-links", str(wheels),
        "agent-saga-langgraph[langgraph]")
    out = _py(python, """
        import json, sys
        import agent_saga
        from agent_saga.adapters.langgraph import saga_run, wrap_tool
        import agent_saga_langgraph
        from agent_saga.adapters import langgraph
        report = agent_saga.patch_all().to_dict()
        removed = agent_saga.unpatch_all()
        print(json.dumps({
            "same": langgraph is agent_saga_langgraph and wrap_tool is agent_saga_langgraph.wrap_tool,
            "report": report, "removed": {k: list(v) for k, v in removed.items()},
            "others": sorted(m for m in sys.modules if m.startswith(("agent_saga_openai", "agent_saga_llama"))),
        }))
    """)
    assert out["same"] is True
    report = out["report"]
    assert isinstance(report, dict)
    assert list(report["patched"]) == ["langgraph"]
    assert "langchain_core.tools.structured.StructuredTool._run" in report["patched"]["langgraph"]
    assert out["removed"] == {"langgraph": report["patched"]["langgraph"][::-1]}  # restored newest first
    assert out["others"] == []


def test_the_mcp_wheel_provides_its_import_path_and_the_cli_verb(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    out = _py(python, """
        import json
        import agent_saga_mcp
        from agent_saga.adapters import mcp
        print(json.dumps({"same": mcp is agent_saga_mcp}))
    """)
    assert out["same"] is True
    help_text = _sh(str(python.with_name("agent-saga")), "mcp", "--help")
    assert "--emit-policy" in help_text and "--boundary" in help_text


def test_the_core_wheel_alone_says_what_to_install_for_mcp(
    venv: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, wheels = venv
    uv = _uv()
    env = tmp_path_factory.mktemp("core-only") / "env"
    _sh(uv, "venv", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(env))
    (core,) = wheels.glob("agent_saga-*.whl")
    _sh(uv, "pip", "install", "--python", str(env / "bin" / "python"), "--find-links", str(wheels), str(core))
    out = subprocess.run([str(env / "bin" / "agent-saga"), "mcp", "--policy", "p.json", "--", "python", "-m", "s"],
                         capture_output=True, text=True, timeout=60, check=False, cwd=env)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "pip install agent-saga-mcp" in out.stderr and "Traceback" not in out.stderr
