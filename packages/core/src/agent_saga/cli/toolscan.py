"""Index a project's agent tools by reading its source with ``ast`` -- never importing it.

Importing a project runs its code (connects to services, reads secrets, needs its
dependencies); parsing does none of that. What a parse can see is what is written:
a decorator or a call that resolves, through the file's own imports, to one of the
frameworks' tool makers. Names are resolved per file (``from langchain_core.tools
import tool as lc_tool`` is followed); anything assembled at run time is not seen.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FRAMEWORKS", "Found", "ImportNames", "ProjectIndex", "hint", "index_project", "module_files"]

#: Framework key -> (what it is called, top-level import names that mean it is used).
FRAMEWORKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "langchain": ("LangChain / LangGraph", ("langchain", "langchain_core", "langchain_community", "langgraph")),
    "crewai": ("CrewAI", ("crewai", "crewai_tools")),
    "openai_agents": ("OpenAI Agents SDK", ("agents",)),
    "llamaindex": ("LlamaIndex", ("llama_index",)),
    "autogen": ("AutoGen", ("autogen_core", "autogen_agentchat", "autogen_ext")),
    "semantic_kernel": ("Semantic Kernel", ("semantic_kernel",)),
    "mcp": ("MCP server", ("mcp", "fastmcp")),
}

_SKIP_DIRS = frozenset({
    ".git", ".hg", ".tox", ".nox", ".venv", "venv", "env", ".env", "node_modules", "__pycache__",
    "build", "dist", "site-packages", ".mypy_cache", ".ruff_cache", ".pytest_cache", "tests", "test",
})


@dataclass(frozen=True)
class Found:
    """One tool found in the source."""

    framework: str  # a key of FRAMEWORKS
    kind: str  # how it was declared, for people: "LangChain @tool", "AutoGen FunctionTool(...)"
    module: str  # dotted module name
    path: str  # file, relative to the project root
    line: int
    name: str  # the tool's name as its framework reports it
    function: str  # the Python name it was found under (for the hint)
    attribute: str | None  # what to import from ``module`` (None: made inside a function)
    shape: str = "object"  # object | class (a tool class: wrap an instance) | method (SK: Class.method)

    @property
    def key(self) -> str:
        """The tool's key in the generated module: where it lives."""
        return f"{self.module}.{self.attribute or self.function}"


@dataclass
class ProjectIndex:
    root: Path
    frameworks: dict[str, list[str]] = field(default_factory=dict)  # key -> files importing it
    tools: list[Found] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was seen but cannot be listed statically
    unparsable: list[str] = field(default_factory=list)


def module_files(root: Path, skip: Path | None = None) -> Iterator[tuple[Path, str]]:
    """Every ``.py`` file of the project with its dotted module name (``src/`` layouts understood)."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS and not d.startswith(".")
                            and not d.endswith(".egg-info"))
        for name in sorted(files):
            if not name.endswith(".py") or name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
                continue
            path = Path(directory) / name
            if skip is not None and path.resolve() == skip.resolve():
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts and parts[0] == "src":
                parts = parts[1:]
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and all(p.isidentifier() for p in parts):
                yield path, ".".join(parts)


class ImportNames:
    """What each local name of one file refers to, from its imports."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.imported: set[str] = set()  # top-level packages imported
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imported.add(alias.name.split(".")[0])
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                self.imported.add(node.module.split(".")[0])
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def resolve(self, node: ast.expr) -> str | None:
        """The dotted name an expression refers to (``lc.tool`` -> ``langchain_core.tools.tool``)."""
        if isinstance(node, ast.Call):
            node = node.func
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id, node.id)
        return ".".join([base, *reversed(attrs)])


def _is(dotted: str | None, packages: tuple[str, ...], *names: str) -> bool:
    if dotted is None:
        return False
    top, _, rest = dotted.partition(".")
    return top in packages and any(dotted.endswith(f".{n}") or rest == n for n in names)


def _string_arg(call: ast.expr, keyword: str | None = None, positional: bool = True) -> str | None:
    if not isinstance(call, ast.Call):
        return None
    for kw in call.keywords:
        if kw.arg == keyword and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    if positional and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _function_arg(call: ast.Call, keyword: str) -> str | None:
    for kw in call.keywords:
        if kw.arg == keyword and isinstance(kw.value, ast.Name):
            return kw.value.id
    if call.args and isinstance(call.args[0], ast.Name):
        return call.args[0].id
    return None


_LANGCHAIN = FRAMEWORKS["langchain"][1]
_CREWAI = FRAMEWORKS["crewai"][1]


class _FileScan:
    def __init__(self, index: ProjectIndex, path: Path, module: str, tree: ast.Module, local: set[str]) -> None:
        self.index = index
        self.rel = str(path.relative_to(index.root))
        self.module = module
        self.tree = tree
        self.names = ImportNames(tree)
        self.local = local  # top-level names of the project's own packages
        self.servers: set[str] = set()  # module-level names bound to an MCP server object

    def add(self, framework: str, kind: str, node: ast.AST, name: str, function: str,
            attribute: str | None, shape: str = "object") -> None:
        self.index.tools.append(Found(framework, kind, self.module, self.rel, getattr(node, "lineno", 0),
                                      name, function, attribute, shape))

    def frameworks(self) -> None:
        for key, (_, packages) in FRAMEWORKS.items():
            # a project's own package called ``agents`` (or ``mcp``) is not the SDK
            if any(p in self.names.imported and p not in self.local for p in packages):
                self.index.frameworks.setdefault(key, []).append(self.rel)

    def run(self) -> None:
        self.frameworks()
        seen: set[int] = set()
        for node in self.tree.body:  # in order: an MCP server is bound before its tools are decorated
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(node, owner=None)
            elif isinstance(node, ast.ClassDef):
                self.klass(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                name = targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None
                seen.add(id(node.value))
                self.call(node.value, name)
        for call in ast.walk(self.tree):  # tools made anywhere else: found, but not importable by name
            if isinstance(call, ast.Call) and id(call) not in seen:
                self.call(call, None)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None) -> None:
        for decorator in node.decorator_list:
            dotted = self.names.resolve(decorator)
            attribute = node.name if owner is None else f"{owner}.{node.name}"
            if owner is None and _is(dotted, _LANGCHAIN, "tool"):
                self.add("langchain", "LangChain @tool", node, _string_arg(decorator) or node.name, node.name, attribute)
            elif owner is None and _is(dotted, _CREWAI, "tool"):
                self.add("crewai", "CrewAI @tool", node, _string_arg(decorator) or node.name, node.name, attribute)
            elif owner is None and _is(dotted, ("agents",), "function_tool") and "agents" not in self.local:
                name = _string_arg(decorator, "name_override", positional=False) or node.name
                self.add("openai_agents", "OpenAI Agents @function_tool", node, name, node.name, attribute)
            elif owner is not None and _is(dotted, ("semantic_kernel",), "kernel_function"):
                name = _string_arg(decorator, "name", positional=False) or node.name
                self.add("semantic_kernel", "Semantic Kernel @kernel_function", node, name, node.name, attribute, "method")
            elif owner is None and self._mcp_tool(decorator):
                name = _string_arg(decorator, "name") or node.name
                self.add("mcp", "MCP server @tool()", node, name, node.name, attribute)

    def _mcp_tool(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Attribute) and target.attr == "tool"
                and isinstance(target.value, ast.Name) and target.value.id in self.servers)

    def klass(self, node: ast.ClassDef) -> None:
        bases = [self.names.resolve(b) for b in node.bases]
        for framework, packages, kind in (("langchain", _LANGCHAIN, "LangChain BaseTool subclass"),
                                          ("crewai", _CREWAI, "CrewAI BaseTool subclass")):
            if any(_is(b, packages, "BaseTool") for b in bases):
                self.add(framework, kind, node, self._class_tool_name(node), node.name, node.name, "class")
                return
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(item, owner=node.name)

    @staticmethod
    def _class_tool_name(node: ast.ClassDef) -> str:
        for item in node.body:
            if isinstance(item, (ast.Assign, ast.AnnAssign)) and isinstance(item.value, ast.Constant) \
                    and isinstance(item.value.value, str):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                if any(isinstance(t, ast.Name) and t.id == "name" for t in targets):
                    return item.value.value
        return node.name

    def call(self, node: ast.Call, target: str | None) -> None:
        dotted = self.names.resolve(node)
        if dotted is None:
            return
        if _is(dotted, ("mcp", "fastmcp"), "FastMCP", "MCPServer") and target is not None:
            self.servers.add(target)
        elif _is(dotted, ("mcp",), "Server") and dotted.startswith("mcp.server"):
            self.index.notes.append(
                f"{self.rel} line {node.lineno}: a low-level MCP Server: its tools are dispatched at run "
                "time and cannot be listed from the source; classify them in a policy for `agent-saga mcp`"
            )
        elif _is(dotted, ("llama_index",), "FunctionTool.from_defaults"):
            fn = _function_arg(node, "fn") or "?"
            name = _string_arg(node, "name", positional=False) or fn
            self.add("llamaindex", "LlamaIndex FunctionTool.from_defaults(...)", node, name, target or fn, target)
        elif _is(dotted, ("autogen_core", "autogen_ext"), "FunctionTool"):
            fn = _function_arg(node, "func") or "?"
            name = _string_arg(node, "name", positional=False) or fn
            self.add("autogen", "AutoGen FunctionTool(...)", node, name, target or fn, target)


def index_project(root: Path, skip: Path | None = None) -> ProjectIndex:
    """Read every module under ``root`` (but ``skip``) and list the frameworks and tools it uses."""
    index = ProjectIndex(root)
    files = list(module_files(root, skip))
    local = {module.split(".")[0] for _, module in files}
    for path, module in files:
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError) as err:
            index.unparsable.append(f"{path.relative_to(root)}: {err}")
            continue
        _FileScan(index, path, module, tree, local).run()
    index.tools.sort(key=lambda t: (t.path, t.line))
    return index


# -- hints --------------------------------------------------------------------------------

_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_HINTS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"send", "email", "mail", "notify", "sms", "post", "publish", "tweet", "message", "alert", "page"}),
     "usually means no automated undo exists -- consider IRREVERSIBLE, which is gated before it runs "
     "rather than undone after"),
    (frozenset({"delete", "remove", "drop", "destroy", "purge", "wipe", "erase", "terminate", "cancel"}),
     "usually destroys something no later call brings back -- consider IRREVERSIBLE, unless you keep a "
     "copy to restore (then COMPENSABLE, with the restore as its undo)"),
    (frozenset({"charge", "pay", "payment", "transfer", "refund", "wire", "withdraw", "deposit", "invoice"}),
     "usually moves money; a refund is a new transaction, not an erasure -- consider COMPENSABLE with the "
     "provider's refund as its undo if there is one, else IRREVERSIBLE"),
    (frozenset({"get", "list", "search", "read", "fetch", "lookup", "find", "query", "describe", "retrieve",
                "check", "count", "view", "show", "load"}),
     "usually only reads -- consider REVERSIBLE with nothing to undo, after checking it writes nothing"),
    (frozenset({"create", "add", "insert", "book", "reserve", "open", "provision", "launch", "start",
                "register", "update", "set", "write", "upload", "assign", "schedule", "enable"}),
     "usually makes or changes something a later call can take back -- consider COMPENSABLE, with that "
     "call registered as its undo (@compensator, @inverse_of)"),
)


def hint(*names: str) -> str:
    """A hint from the words of a tool's names, labelled as one; never a classification."""
    words = [w.lower() for n in names for w in _WORDS.findall(n)]
    for vocabulary, advice in _HINTS:
        for word in words:
            if word in vocabulary:
                return f"the name contains {word!r}, which {advice}. A hint, not a classification."
    return "nothing in the name suggests an answer: read what the tool does. A hint, not a classification."
