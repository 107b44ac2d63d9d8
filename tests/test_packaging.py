"""Wheels, not the work tree: build the core and every adapter, install them in a fresh
virtual environment, and check what a user gets.

1. Adapters installed, no framework: both import paths fail with an ImportError that
   says what to install, and ``patch_all()`` patches nothing and imports no adapter module.
2. LangGraph added: ``agent_saga.adapters.langgraph`` *is* ``agent_saga_langgraph``, and
   ``patch_all()`` patches exactly that framework.
3. Our name on the index: ``agent-saga`` 0.x-2.x there is an unrelated project with the same
   import name. pip's own resolver against the index, asked for each adapter of the checkout
   alone, never picks that line (it may find nothing); offered our wheels too, it picks ours.
4. The README's first lines, as written, make a virtual environment and run the demo in it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
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
    "adapter-google-adk": "agent_saga_google_adk",
    "adapter-agno": "agent_saga_agno",
    "adapter-pydantic-ai": "agent_saga_pydantic_ai",
    "adapter-strands": "agent_saga_strands",
    "adapter-vertex": "agent_saga_vertex",
    "adapter-mcp": "agent_saga_mcp",  # depends on the MCP SDK itself: it is the proxy too
}
# The core's version, read from its source: this test's own environment does not install it.
VERSION = re.search(r'__version__ = "(.+)"', (ROOT / "packages/core/src/agent_saga/_version.py").read_text())[1]
# Every distribution of ours besides the core, including any not built into the wheel venv below.
OURS = tuple(sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml") if p.parent.name != "core"))
ADAPTERS = tuple(folder for folder in DISTRIBUTIONS if folder != "core")
# The 3.x line is ours; the index's 0.x-2.x line of the same name is not (see docs/ADAPTERS.md).
CORE_PIN = "agent-saga>=3.0.0,<4"
# Adapters whose framework is an extra, and so is absent after a plain install.
WITH_EXTRA = ("langgraph", "openai_agents", "llamaindex", "crewai", "autogen", "semantic_kernel", "ag2",
              "google_adk", "agno", "pydantic_ai", "strands", "vertex")

pytestmark = pytest.mark.slow


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        pytest.fail("the packaging test needs `uv` (pip install uv); tox's packaging env installs it")
    return found


def _env() -> dict[str, str]:
    """This environment without what ties a child to it (its venv, our settings)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "AGENT_SAGA", "UV_PROJECT"))}


def _sh(*cmd: str, cwd: Path | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=_env(), check=False)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """What ``scripts/wheelhouse`` builds (every distribution, checked), as the README has a user run it."""
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "wheelhouse"), str(wheels)], capture_output=True,
                           text=True, env={**_env(), "PATH": f"{Path(_uv()).parent}:{os.environ['PATH']}"},
                           timeout=1200, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return wheels, built.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: tuple[Path, str]) -> tuple[Path, Path]:
    uv = _uv()
    wheels, _ = wheelhouse
    env = tmp_path_factory.mktemp("venv") / "env"
    _sh(uv, "venv", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(env))
    python = env / "bin" / "python"
    names = {module.replace("_", "-") for module in DISTRIBUTIONS.values()}
    built = sorted(str(w) for w in wheels.glob("*.whl") if w.name.split("-")[0].replace("_", "-") in names)
    assert len(built) == len(DISTRIBUTIONS), built
    _sh(uv, "pip", "install", "--python", str(python), "--find-links", str(wheels), *built)
    return python, wheels


def _py(python: Path, code: str) -> dict[str, object]:
    out = _sh(str(python), "-c", textwrap.dedent(code), cwd=python.parent)
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


PROBE = """
import json, sys
from importlib import metadata
import agent_saga
before = set(sys.modules)
report = agent_saga.patch_all().to_dict()
adapters_imported = sorted(m for m in sys.modules if m.startswith("agent_saga_"))
errors = {}
for name in ("langgraph", "openai_agents", "llamaindex", "crewai", "autogen", "semantic_kernel", "ag2", "vertex",
             "google_adk", "agno", "pydantic_ai", "strands", "camunda"):
    try:
        __import__("agent_saga.adapters." + name)
        errors[name] = None
    except ImportError as err:
        errors[name] = str(err)
from agent_saga.plugins import policy_schema
print(json.dumps({"report": report, "imported": adapters_imported, "errors": errors,
                  "site": agent_saga.__file__, "schema": policy_schema()["title"],
                  "pluggy_before_patch_all": "pluggy" in before,
                  "versions": [agent_saga.__version__, metadata.version("agent-saga")]}))
"""


def test_wheels_without_frameworks_patch_nothing_and_import_no_adapter(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    out = _py(python, PROBE)
    assert str(out["site"]).startswith(str(python.parents[1]))  # the wheel, not the work tree
    assert out["versions"] == [VERSION, VERSION]
    report = out["report"]
    assert isinstance(report, dict)
    assert report["patched"] == {}
    skipped = report["skipped"]
    # Each adapter, and the core's own patch of the OpenAI SDK (its model calls as steps, the `openai` extra).
    assert sorted(skipped) == sorted((*WITH_EXTRA, "openai"))
    assert skipped["openai"] == "openai is not installed"
    assert skipped["langgraph"] in ("langgraph is not installed", "langchain-core is not installed")
    assert skipped["llamaindex"] == "llama-index-core is not installed"
    assert skipped["openai_agents"] == "openai-agents is not installed"
    assert skipped["crewai"] == "crewai is not installed"
    assert skipped["autogen"] in ("autogen-core is not installed", "autogen-agentchat is not installed")
    assert skipped["semantic_kernel"] == "semantic-kernel is not installed"
    assert skipped["ag2"] == "ag2 is not installed"
    assert skipped["google_adk"] == "google-adk is not installed"
    assert skipped["agno"] == "agno is not installed"
    assert skipped["pydantic_ai"] == "pydantic-ai-slim is not installed"
    assert skipped["strands"] == "strands-agents is not installed"
    assert skipped["vertex"] == "google-genai is not installed"
    assert out["imported"] == []
    assert out["pluggy_before_patch_all"] is False
    assert out["schema"] == "agent-saga tool policy"  # the JSON Schema ships in the core wheel
    errors = out["errors"]
    assert isinstance(errors, dict)
    assert "pip install 'agent-saga-langgraph[langgraph]>=3.0.0'" in errors["langgraph"]
    assert "pip install 'agent-saga-openai-agents[openai-agents]>=3.0.0'" in errors["openai_agents"]
    assert "pip install 'agent-saga-llamaindex[llamaindex]>=3.0.0'" in errors["llamaindex"]
    assert "pip install 'agent-saga-crewai[crewai]>=3.0.0'" in errors["crewai"]
    assert "pip install 'agent-saga-autogen[autogen]>=3.0.0'" in errors["autogen"]
    assert "pip install 'agent-saga-semantic-kernel[semantic-kernel]>=3.0.0'" in errors["semantic_kernel"]
    assert "pip install 'agent-saga-ag2[ag2]>=3.0.0'" in errors["ag2"]
    assert "pip install 'agent-saga-google-adk[google-adk]>=3.0.0'" in errors["google_adk"]
    assert "pip install 'agent-saga-agno[agno]>=3.0.0'" in errors["agno"]
    assert "pip install 'agent-saga-pydantic-ai[pydantic-ai]>=3.0.0'" in errors["pydantic_ai"]
    assert "pip install 'agent-saga-strands[strands]>=3.0.0'" in errors["strands"]
    assert "pip install 'agent-saga-vertex[vertex]>=3.0.0'" in errors["vertex"]
    assert "pip install 'agent-saga-camunda>=3.0.0'" in errors["camunda"]  # no such distribution installed


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
    assert "pip install 'agent-saga-mcp>=3.0.0'" in out.stderr and "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def pip(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """pip as a user has it: the one ``python -m venv`` puts in a fresh environment."""
    env = tmp_path_factory.mktemp("pip") / "env"
    _sh(sys.executable, "-m", "venv", str(env))
    return [str(env / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--disable-pip-version-check"]


def _resolve(pip: list[str], report: Path, *requirements: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*pip, "--report", str(report), *requirements], capture_output=True, text=True,
                          env=_env(), timeout=600, check=False)


def _chosen(report: Path) -> dict[str, str]:
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


@pytest.mark.parametrize("folder", OURS)
def test_pips_resolver_never_installs_the_unrelated_2x_core_with_one_of_ours_alone(
    pip: list[str], folder: str, tmp_path: Path
) -> None:
    out = _resolve(pip, tmp_path / "report.json", "-e", str(ROOT / "packages" / folder))
    if out.returncode == 0:
        chosen = _chosen(tmp_path / "report.json")
        assert chosen.get("agent-saga", "").startswith("3."), chosen
        return
    # Refusing to resolve is the acceptable outcome, but only for this reason: the index was
    # asked for agent-saga, offered the other project's 2.x, and pip took none of it.
    refused = re.search(r"requirement (agent-saga[<>=!~.,\w]*) (?:\(from [^)]*\) )?\(from versions: ([^)]*)\)",
                        out.stderr)
    assert refused, f"pip did not report asking the index for agent-saga (is the index reachable?):\n{out.stderr}"
    assert sorted(refused[1].removeprefix("agent-saga").split(",")) == ["<4", ">=3.0.0"]
    assert any(v.startswith("2.") for v in refused[2].split(", ")), refused[0]  # the index was reached


def test_pips_resolver_prefers_our_core_wheel_to_the_indexs_2x(
    pip: list[str], venv: tuple[Path, Path], tmp_path: Path
) -> None:
    # Our wheels beside the index, asked for by name: a bare dependency would take the index's
    # final 2.x over our pre-release; the pin leaves only ours.
    _, wheels = venv
    names = [f"agent-saga-{folder.removeprefix('adapter-')}" for folder in ADAPTERS]
    out = _resolve(pip, tmp_path / "report.json", "--find-links", str(wheels), *names)
    assert out.returncode == 0, out.stdout + out.stderr
    chosen = _chosen(tmp_path / "report.json")
    assert {name: chosen.get(name) for name in ["agent-saga", *names]} == dict.fromkeys(["agent-saga", *names], VERSION)


def test_the_core_asked_for_by_name_beside_the_index_is_ours(
    pip: list[str], venv: tuple[Path, Path], tmp_path: Path
) -> None:
    # `pip install --find-links DIR agent-saga`: a release, not a pre-release, so pip takes ours over
    # the index's unrelated 2.3.11 (as 3.0.0.dev0 it took 2.3.11, the newest final release it saw).
    _, wheels = venv
    out = _resolve(pip, tmp_path / "report.json", "--find-links", str(wheels), "agent-saga")
    assert out.returncode == 0, out.stdout + out.stderr
    assert _chosen(tmp_path / "report.json")["agent-saga"] == VERSION
    assert re.fullmatch(r"3\.\d+\.\d+", VERSION)  # a release: no .devN, aN, bN or rcN


def test_the_wheelhouse_builds_and_checks_every_distribution(wheelhouse: tuple[Path, str]) -> None:
    wheels, said = wheelhouse
    assert said.startswith(f"wheelhouse: {len(OURS) + 1} wheels and sdists in ")
    assert len(list(wheels.glob("*.whl"))) == len(OURS) + 1
    assert len(list(wheels.glob("*.tar.gz"))) == len(OURS) + 1  # an sdist of every distribution


def test_the_classifiers_name_the_python_ci_runs_and_the_readme_says_so() -> None:
    for folder in ("core", *OURS):  # every distribution, not the core alone: each installs on its own
        project = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]
        classifiers = project.get("classifiers", [])
        versions = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
        assert versions == {f"{sys.version_info.major}.{sys.version_info.minor}"} == {"3.11"}, folder  # what CI runs
        assert "Programming Language :: Python :: Implementation :: CPython" in classifiers, folder
    assert "CI runs CPython 3.11 only" in (ROOT / "README.md").read_text()


def test_every_distribution_has_the_cores_version_and_pins_the_3x_core() -> None:
    core = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())["project"]
    assert core["name"] == "agent-saga" and VERSION.startswith("3.")
    for folder in OURS:
        project = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]
        assert project["version"] == VERSION, folder
        ours = [d for d in project["dependencies"] if re.match(r"agent-saga(?![-\w])", d)]
        assert ours == [CORE_PIN], (folder, project["dependencies"])


def test_every_wheel_carries_the_license_and_the_notice(venv: tuple[Path, Path]) -> None:
    # Apache-2.0 practice: each distribution ships both; each folder holds a copy of the root's.
    for folder in ("core", *OURS):
        for name in ("LICENSE", "NOTICE"):
            assert (ROOT / "packages" / folder / name).read_bytes() == (ROOT / name).read_bytes(), (folder, name)
    _, wheels = venv
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == len(OURS) + 1
    for wheel in built:
        with zipfile.ZipFile(wheel) as archive:
            licenses = sorted(Path(n).name for n in archive.namelist() if ".dist-info/licenses/" in n)
        assert licenses == ["LICENSE", "NOTICE"], wheel.name


def test_the_readmes_first_lines_run_the_demo_in_a_new_virtual_environment(tmp_path: Path) -> None:
    """The README's opening lines, as written, in a copy of the core (what they touch)."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert block, "README.md opens with a ```bash block"
    demo_line, test_line = block[1].splitlines()  # the two commands: the demo, then every test
    assert "venv" in demo_line and "agent-saga demo" in demo_line and test_line.startswith("bash scripts/test")
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "packages" / "core", clone / "packages" / "core",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "node_modules", "build", "dist"))
    out = subprocess.run(["bash", "-ec", demo_line], cwd=clone, capture_output=True, text=True,
                         env=_env(), timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "world afterwards: nothing left standing" in out.stdout
    assert (clone / ".venv" / "bin" / "agent-saga").exists()  # installed into the venv the first line made
    assert (clone / "agent-saga.wal").exists()  # the default log: `agent-saga graph` finds it unasked


def test_the_core_wheel_without_its_extras_says_what_to_install_for_a_tier_or_a_schema(
    venv: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, wheels = venv
    uv = _uv()
    env = tmp_path_factory.mktemp("core-no-extras") / "env"
    _sh(uv, "venv", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(env))
    (core,) = wheels.glob("agent_saga-*.whl")
    _sh(uv, "pip", "install", "--python", str(env / "bin" / "python"), "--find-links", str(wheels), str(core))
    out = _py(env / "bin" / "python", """
        import json
        from importlib.util import find_spec
        from agent_saga import ConfigurationError, OpenAICompatibleTier, matches_schema
        errors = []
        for make in (lambda: OpenAICompatibleTier("local-7b", "qwen-7b"), lambda: matches_schema({})):
            try:
                make()
                errors.append(None)
            except ConfigurationError as err:
                errors.append(str(err))
        print(json.dumps({"openai": find_spec("openai") is not None, "jsonschema": find_spec("jsonschema") is not None,
                          "errors": errors}))
    """)
    assert out == {"openai": False, "jsonschema": False, "errors": [
        "OpenAICompatibleTier needs the openai SDK: pip install 'agent-saga[openai]>=3.0.0'",
        "matches_schema needs jsonschema: pip install 'agent-saga[schema]>=3.0.0'",
    ]}
