"""``agent-saga adopt --out FILE``: find a project's tools and write the module that wraps them.

The project is read with ``ast`` (``cli/toolscan.py``), never imported. What the
command will not do is decide a tool's semantics: every tool is written as
``DECIDE``, and the module refuses to import until a person replaced each one (see
``agent_saga.adopt``). Under each tool is a hint from its name, labelled as a hint.

Exit codes: 0 written; 1 no tool found (nothing written); 2 usage (``--out`` exists,
or is not a module name); 3 the project could not be read.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_saga._version import __version__
from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_USAGE, CliError
from agent_saga.cli.options import add_verb
from agent_saga.cli.toolscan import FRAMEWORKS, Found, ProjectIndex, hint, index_project

__all__ = ["register", "render", "run_adopt"]

# framework -> (the adapter module, the wrapper imported from it as _wrap_<framework>)
_WRAPPERS = {
    "langchain": ("agent_saga.adapters.langgraph", "wrap_tool"),
    "crewai": ("agent_saga.adapters.crewai", "wrap_tool"),
    "openai_agents": ("agent_saga.adapters.openai_agents", "wrap_tool"),
    "llamaindex": ("agent_saga.adapters.llamaindex", "wrap_tool"),
    "autogen": ("agent_saga.adapters.autogen", "wrap_tool"),
    "semantic_kernel": ("agent_saga.adapters.semantic_kernel", "wrap_plugin"),
}

_HEADER = '''\
"""Saga wrappers for the tools of {project} -- written by `agent-saga adopt` (agent-saga {version}).

{frameworks}

Nothing in this file was decided for you. Every tool's semantics is DECIDE, and this
module refuses to import until a person has replaced each DECIDE below with one of:

  "REVERSIBLE"    nothing to undo (a read), or undone for free
  "COMPENSABLE"   a later call undoes it: give its wrapper compensate= (a factory over
                  the tool's result), or pair an inverse with @inverse_of
  "IRREVERSIBLE"  nothing undoes it (an email, a wire): the gate decides before it runs

The hints are guesses from names, labelled as such. Use the tools from this module
instead of the originals (which are left untouched).
"""

from __future__ import annotations

from typing import Any

from agent_saga.adopt import DECIDE, require_decided
'''


def register(verbs: Any) -> None:
    p = add_verb(verbs, "adopt", run_adopt, raw=False, examples="example: agent-saga adopt --out saga_tools.py")
    p.add_argument("--out", required=True, metavar="FILE", help="the module to write (e.g. saga_tools.py)")
    p.add_argument("--root", default=".", metavar="DIR", help="the project to read (default: the current directory)")
    p.add_argument("--force", action="store_true", help="overwrite FILE (it may hold decisions already made)")


def _identifier(text: str) -> str:
    name = re.sub(r"\W+", "_", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)).strip("_").lower()
    return name if name.isidentifier() else f"tool_{name}"


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, 96, initial_indent=first, subsequent_indent=rest)


def _listing(tool: Found) -> list[str]:
    """The people-facing lines for one tool (printed, and repeated in the module)."""
    where = f"{tool.kind}, {tool.path} line {tool.line}"
    if tool.name != tool.function:
        where += f", named {tool.name!r}"
    return [f"{tool.key}  ({where})", *_wrapped(hint(tool.name, tool.function), "    hint: ", "    ")]


def render(index: ProjectIndex, project: str) -> str:
    """The module's text."""
    tools = index.tools
    frameworks = "\n".join(_wrapped(
        "Frameworks found: " + ", ".join(FRAMEWORKS[k][0] for k in sorted({t.framework for t in tools})) + ".",
        "", ""))
    out = [_HEADER.format(project=project, version=__version__, frameworks=frameworks), "SEMANTICS: dict[str, Any] = {"]
    for tool in tools:
        out += ["    # " + line for line in _listing(tool)]
        out.append(f"    {tool.key!r}: DECIDE,")
    out += ["}", "", "DECIDED = require_decided(SEMANTICS, __name__)  # raises while any DECIDE is left above", "",
            "# Everything below runs only once every tool is classified. A COMPENSABLE tool also needs",
            "# compensate=... on its line (or an @inverse_of pairing) before its first call in a saga.", ""]
    wrapped = [t for t in tools if t.framework in _WRAPPERS and t.attribute is not None]
    imports = [f"from {_WRAPPERS[f][0]} import {_WRAPPERS[f][1]} as _wrap_{f}  # noqa: E402"
               for f in sorted({t.framework for t in wrapped})]
    modules = {m: f"_m{i}" for i, m in enumerate(sorted({t.module for t in wrapped if t.shape == "object"}))}
    project_imports = [f"import {module} as {alias}  # noqa: E402" for module, alias in modules.items()]
    assignments, definitions = _wrappers(tools, modules)
    blocks = ["\n\n".join("\n".join(group) for group in (imports, project_imports) if group)] if imports else []
    if assignments:
        blocks.append("\n".join(assignments))
    blocks += ["\n".join(d) for d in definitions]
    return "\n".join(out) + "\n" + "\n\n\n".join(blocks) + "\n"


def _wrappers(tools: list[Found], modules: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    """The module-level wrapped tools (and comments), and the wrapping functions."""
    used: set[str] = set()

    def fresh(name: str, module: str) -> str:
        candidate = _identifier(name)
        if candidate in used:
            candidate = _identifier(f"{module.rsplit('.', 1)[-1]}_{name}")
        while candidate in used:
            candidate += "_"
        used.add(candidate)
        return candidate

    assignments: list[str] = []
    definitions: list[list[str]] = []
    plugins: dict[tuple[str, str], list[Found]] = defaultdict(list)
    for tool in tools:
        semantics = f"DECIDED[{tool.key!r}]"
        if tool.framework == "mcp":
            continue
        if tool.attribute is None:
            assignments += _wrapped(
                f"{tool.key} ({tool.kind}, {tool.path} line {tool.line}) is made inside a function, so it "
                f"cannot be imported from here: wrap it where it is made, with wrap_tool(tool, semantics={semantics})",
                "# ", "#   ")
        elif tool.shape == "method":
            plugins[(tool.module, tool.attribute.split(".")[0])].append(tool)
        elif tool.shape == "class":
            definitions.append([
                f"def {fresh(f'wrap_{tool.attribute}', tool.module)}(tool: Any) -> Any:",
                f'    """Wrap an instance of {tool.module}.{tool.attribute} ({tool.kind}), made as your code makes it."""',
                f"    return _wrap_{tool.framework}(tool, semantics={semantics})",
            ])
        else:
            assignments.append(f"{fresh(tool.attribute, tool.module)} = _wrap_{tool.framework}("
                               f"{modules[tool.module]}.{tool.attribute}, semantics={semantics})")
    for (module, cls), methods in plugins.items():
        definitions.append([
            f"def {fresh(f'wrap_{cls}_plugin', module)}(plugin: Any) -> Any:",
            f'    """Wrap a KernelPlugin made from {module}.{cls} (KernelPlugin.from_object(name, {cls}(...)))."""',
            "    return _wrap_semantic_kernel(plugin, {",
            *(f'        {m.name!r}: {{"semantics": DECIDED[{m.key!r}]}},' for m in methods),
            "    })",
        ])
    servers = [t for t in tools if t.framework == "mcp"]
    if servers:
        definitions.append([
            "def mcp_policy() -> dict[str, Any]:",
            '    """The tool policy of the MCP server tools above, for `agent-saga mcp --policy FILE -- <server command>`.',
            "",
            '    Write it with json.dump(mcp_policy(), open("saga-policy.json", "w"), indent=2). A COMPENSABLE',
            '    entry also needs "compensate": {"handler": ..., "args": {...}} (see docs/ADAPTERS.md).',
            '    """',
            '    return {"mode": "enforce", "tools": {',
            *(f'        {t.name!r}: {{"semantics": DECIDED[{t.key!r}].value}},' for t in servers),
            "    }}",
        ])
    return assignments, definitions


def _print_index(index: ProjectIndex, out: Path) -> None:
    for key, files in sorted(index.frameworks.items()):
        print(f"framework: {FRAMEWORKS[key][0]} (imported in {len(files)} file(s), first {files[0]})")
    print(f"{len(index.tools)} tool(s) found; wrote {out}. Every one is DECIDE: the module will not import "
          "until each is classified.")
    for tool in index.tools:
        print()
        lines = _listing(tool)
        print("  " + lines[0])
        for line in lines[1:]:
            print("  " + line)
    for note in index.notes:
        print(f"\nnote: {note}")
    for bad in index.unparsable:
        print(f"\nnot read (does not parse): {bad}")


def run_adopt(args: argparse.Namespace) -> int:
    """Read the project's Python files (parsed, never imported), detect the agent frameworks it uses,
    find its tools and write a module wrapping each one as a saga step. Every tool's semantics is
    DECIDE: the module will not import until a person classified each.
    """
    root = Path(args.root)
    out = Path(args.out)
    if not root.is_dir():
        raise CliError(f"--root {root}: not a directory")
    if out.suffix != ".py" or not out.stem.isidentifier():
        raise CliError(f"--out {out}: give a Python module file name, such as saga_tools.py", EXIT_USAGE)
    if out.exists() and not args.force:
        raise CliError(f"--out {out} exists and may hold decisions already made; move it, or pass --force",
                       EXIT_USAGE)
    index = index_project(root, skip=out)
    if not index.tools:
        seen = ", ".join(FRAMEWORKS[k][0] for k in sorted(index.frameworks)) or "none"
        print(f"no tool found under {root.resolve()} (frameworks imported: {seen}); nothing written")
        for note in index.notes:
            print(f"note: {note}")
        return EXIT_FINDING
    out.write_text(render(index, root.resolve().name), encoding="utf-8")
    _print_index(index, out)
    return EXIT_OK
