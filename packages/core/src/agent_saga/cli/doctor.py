"""``agent-saga doctor [--replicas N] [--deploy] [--json]``: the postures that silently lose effects.

Run it in the project's directory, with the environment a replica runs with. It reads the
project's source with ``ast`` (never importing it), the environment, and the log file when
there is one, and reports:

* ``log`` -- no log chosen (a blocker for a deployment: ``--deploy`` or N > 1 replicas; a
  warning on a developer's machine), an in-memory log, a server log whose backend is missing, a file
  log shared by several hosts;
* ``permissions``, ``chain``, ``secrets`` -- a log others can read, one without a hash
  chain (or whose chain is broken), one holding secret-looking values in clear;
* ``kill_switch``, ``limits`` -- with N > 1 replicas, a switch or a limit store that each
  replica keeps to itself (a halt that stops one, a budget spent N times);
* ``handlers`` -- an undo the recovery daemon would not have imported, or one named and
  never declared;
* ``todo`` -- every ``TODO(agent-saga)`` marker: a decision nobody made yet.

Each finding is a BLOCKER or a WARNING and says how to fix it. Exit codes: 0 no
blocker; 1 at least one blocker; 2 usage; 3 the project could not be read.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.cli.main import EXIT_FINDING, EXIT_OK, EXIT_USAGE, CliError
from agent_saga.cli.options import add_json_option, add_log_option, add_verb
from agent_saga.cli.toolscan import ImportNames, module_files
from agent_saga.inert import inert
from agent_saga.install import pip_install
from agent_saga.log.resolve import DEFAULT_LOG_FILE, LOG_ENV, backend_of, chosen_log

__all__ = ["Finding", "diagnose", "register", "run_doctor"]

BLOCKER, WARNING = "BLOCKER", "WARNING"
TODO_MARK = "TODO(agent-saga)"
_TODO_FILES = (".py", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".json", ".env", ".sh")
_DRIVERS = {"postgres": "psycopg", "redis": "redis"}  # each server log's backend: the module its extra installs


@dataclass(frozen=True)
class Finding:
    check: str
    level: str  # BLOCKER | WARNING
    message: str
    fix: str


def register(verbs: Any) -> None:
    p = add_verb(
        verbs, "doctor", run_doctor, raw=False,
        examples="example: agent-saga doctor --replicas 3   (or --deploy for one replica in a container)",
    )
    p.add_argument("--replicas", type=int, default=1, metavar="N",
                   help="how many processes (on how many hosts) will run it (default: %(default)s)")
    p.add_argument("--deploy", action="store_true",
                   help="check it as a deployment (a container, a server), not a developer's machine: "
                   "a log nobody chose is then a blocker (implied by --replicas above 1)")
    p.add_argument("--root", default=".", metavar="DIR", help="the project (default: the current directory)")
    add_log_option(p, "the log to check", default="$AGENT_SAGA_WAL; none chosen is a warning, a blocker to deploy")
    add_json_option(p, "the findings")


# -- the project's source ------------------------------------------------------------------


@dataclass
class _Module:
    name: str
    rel: str
    tree: ast.Module
    names: ImportNames
    imports: set[str] = field(default_factory=set)


def _imports(module: str, is_package: bool, tree: ast.Module) -> set[str]:
    """Every module name this one imports (relative imports resolved)."""
    found: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join([*parent, *([node.module] if node.module else [])])
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


class _Source:
    def __init__(self, root: Path) -> None:
        self.modules: dict[str, _Module] = {}
        for path, name in module_files(root):
            try:
                tree = ast.parse(path.read_bytes(), filename=str(path))
            except (SyntaxError, ValueError, OSError):
                continue  # `adopt` reports files that do not parse; here they declare nothing
            rel = str(path.relative_to(root))
            self.modules[name] = _Module(name, rel, tree, ImportNames(tree),
                                         _imports(name, path.name == "__init__.py", tree))

    def calls(self, *names: str) -> Iterator[tuple[_Module, ast.Call]]:
        """Calls resolving to ``agent_saga[...].<name>`` for one of ``names``."""
        for module in self.modules.values():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call):
                    dotted = module.names.resolve(node.func) or ""
                    if dotted.split(".")[0] == "agent_saga" and dotted.rsplit(".", 1)[-1] in names:
                        yield module, node

    def closure(self, start: str) -> set[str]:
        """``start`` and every project module it imports, directly or not (packages included)."""
        seen: set[str] = set()
        todo = [start]
        while todo:
            name = todo.pop()
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b too
                prefix = ".".join(parts[:i])
                if prefix in self.modules and prefix not in seen:
                    seen.add(prefix)
                    todo.extend(self.modules[prefix].imports)
        return seen


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


# -- the checks ------------------------------------------------------------------------------


class _Doctor:
    def __init__(self, root: Path, replicas: int, env: Mapping[str, str], wal: str | None, deploy: bool) -> None:
        self.root = root
        self.replicas = replicas
        self.deploy = deploy or replicas > 1
        self.env = env
        # Unlike the other verbs, doctor does not fall back to ./agent-saga.wal: a log left to
        # that fallback is itself the finding.
        self.wal = wal if wal is not None else chosen_log(env)
        self.source = _Source(root)
        self.findings: list[Finding] = []

    def add(self, check: str, level: str, message: str, fix: str) -> None:
        self.findings.append(Finding(check, level, message, fix))

    def where(self, module: _Module, node: ast.AST) -> str:
        return f"{module.rel}:{getattr(node, 'lineno', 0)}"

    def run(self) -> list[Finding]:
        self.log()
        self.memory_logs()
        self.fleet()
        self.handlers()
        self.todos()
        return self.findings

    def log(self) -> None:
        if self.wal is None:
            # On a developer's machine ./agent-saga.wal is where the demo and the docs look; a
            # deployment's working directory may be gone with its container, and the log with it.
            self.add("log", BLOCKER if self.deploy else WARNING,
                     f"no saga log is chosen ({LOG_ENV} is not set): sagas would write "
                     f"./{DEFAULT_LOG_FILE} wherever the process happens to start, which a container loses with it",
                     f"set {LOG_ENV} to a file on storage that outlives the process (a volume), or a "
                     "postgresql:// URL" + ("" if self.deploy else "; fine on this machine, a blocker to deploy "
                                            "(agent-saga doctor --deploy)"))
            return
        try:
            backend = backend_of(self.wal)
        except ValueError:
            scheme = self.wal.partition("://")[0].lower()
            self.add("log", BLOCKER, f"{LOG_ENV}={self.wal!r}: {scheme}:// names no log backend",
                     "give a file path or a postgresql:// URL")
            return
        if backend != "file":
            self.server_log(backend)
            return
        if self.replicas > 1:
            self.add("log", WARNING, f"the log {self.wal} is a file: replicas share it only on one host, and "
                     "a replica whose volume is gone takes its dead sagas' undos with it",
                     "replicas on several hosts: a postgresql:// log; on one host: one volume for all of them")
        path = Path(self.wal)
        if path.is_file():
            self.log_file(path)

    def server_log(self, backend: str) -> None:
        if importlib.util.find_spec(_DRIVERS[backend]) is None:
            scheme = self.wal.partition("://")[0].lower() if self.wal else backend
            self.add("log", BLOCKER, f"{LOG_ENV} is a {scheme}:// URL, but its driver ({_DRIVERS[backend]}) is "
                     "not installed", pip_install("agent-saga", backend))

    def memory_logs(self) -> None:
        for module, call in self.source.calls("MemoryWAL"):
            self.add("log", BLOCKER, f"{self.where(module, call)} builds a MemoryWAL: a crash loses every open "
                     "saga's undo, and no recovery daemon can finish them",
                     "use the default log (AGENT_SAGA_WAL) or a FileWAL; keep MemoryWAL to tests")

    def log_file(self, path: Path) -> None:
        from agent_saga.log.chain import verify_file
        from agent_saga.recovery.paths import recovery_dir

        for item in [path, *sorted(recovery_dir(path).rglob("*"))]:
            mode = item.stat().st_mode
            if item.is_file() and mode & 0o077:
                self.add("permissions", BLOCKER, f"{item} is readable or writable by others "
                         f"(mode {stat.S_IMODE(mode):04o}): it holds every saga's arguments and undos",
                         f"chmod 600 {item}")
        report = verify_file(path)
        if report.status in ("unchained", "partial"):
            self.add("chain", BLOCKER, f"{path} is {report.label}: an edit to it would go unnoticed, so it "
                     "is not evidence", "write the log with chain=True (the default); start a new log")
        elif report.status == "broken":
            self.add("chain", BLOCKER, f"{path}: chain {report.label}; recovery refuses to act on it",
                     f"investigate with `agent-saga verify --wal-path {path}` before anything else")
        self.secrets(path)

    def secrets(self, path: Path) -> None:
        from agent_saga.credentials import CredentialError, assert_no_secrets
        from agent_saga.log.codec import decode_line
        from agent_saga.log.fs import open_regular
        from agent_saga.log.lines import iter_lines
        from agent_saga.redaction import REDACTED

        def scrubbed(value: Any) -> Any:  # redacted values are not secrets
            if isinstance(value, Mapping):
                return {k: scrubbed(v) for k, v in value.items()}
            if isinstance(value, list):
                return [scrubbed(v) for v in value]
            return None if value == REDACTED else value

        with open_regular(path) as fh:
            for line in iter_lines(fh):
                try:
                    record = decode_line(line.raw)
                except ValueError:
                    continue  # the chain check above reports it
                if "enc" in record:
                    continue  # encrypted at rest
                try:
                    assert_no_secrets(scrubbed(record.get("body")), where=f"record seq {record.get('seq')} body")
                except CredentialError as err:
                    self.add("secrets", BLOCKER, f"{path}: {str(err).split(';')[0]}, stored in clear",
                             "encrypt the log (AGENT_SAGA_WAL_KEY, pip install 'agent-saga[encryption]>=3.0.0'), pass "
                             "credentials as credential_ref(...), and redact the record (agent_saga.log.redact_where)")
                    return

    def fleet(self) -> None:
        if self.replicas <= 1:
            return
        n = self.replicas
        switch = self.env.get("AGENT_SAGA_SWITCH") or ""
        if not switch.startswith(("redis://", "rediss://", "unix://")):
            where = f"the file {switch}" if switch else "each host's /var/lib/agent-saga/switch.json"
            self.add("kill_switch", BLOCKER, f"the kill switch is {where}: `agent-saga halt` stops the "
                     f"replicas of one host, not all {n}",
                     "set AGENT_SAGA_SWITCH=redis://... on every replica (pip install 'agent-saga[redis]>=3.0.0')")
        for module, call in self.source.calls("FileSwitchStore"):
            self.add("kill_switch", BLOCKER, f"{self.where(module, call)} builds a FileSwitchStore: a halt "
                     f"through it reaches one host of {n} replicas", "use RedisSwitchStore")
        shared = any(True for _ in self.source.calls("RedisLimitStore"))
        for module, call in self.source.calls("MemoryLimitStore"):
            self.add("limits", BLOCKER, f"{self.where(module, call)} builds a MemoryLimitStore: each of {n} "
                     "replicas counts its own spend", "use RedisLimitStore")
        if not shared:
            for module, call in self.source.calls("BudgetLimit", "RateLimit"):
                self.add("limits", BLOCKER, f"{self.where(module, call)} sets a limit, and no shared limit "
                         f"store is configured: {n} replicas may spend {n} times it",
                         "set_limit_store(RedisLimitStore(...)) (or give the gate one)")

    def handlers(self) -> None:
        declared: dict[str, str] = {}  # handler name -> where
        declaring: dict[str, list[str]] = {}  # module -> handler names it declares
        for module in self.source.modules.values():
            for node in ast.walk(module.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for deco in node.decorator_list:
                        dotted = module.names.resolve(deco) or ""
                        if dotted.split(".")[0] == "agent_saga" and dotted.endswith(".compensator") \
                                and isinstance(deco, ast.Call) and deco.args \
                                and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str):
                            declared[deco.args[0].value] = self.where(module, node)
                            declaring.setdefault(module.name, []).append(deco.args[0].value)
        self.named_but_missing(declared)
        lifespans = list(self.source.calls("saga_lifespan"))
        if not lifespans:
            if declaring:
                self.add("handlers", WARNING, "no saga_lifespan in the project: whatever runs the recovery "
                         f"daemon must import {', '.join(sorted(declaring))}",
                         "saga-recoveryd " + " ".join(f"--import {m}" for m in sorted(declaring)))
            return
        imported: set[str] = set()
        for module, call in lifespans:
            imported |= self.source.closure(module.name)
            for extra in _strings(_keyword(call, "handlers")):
                imported |= self.source.closure(extra)
        for name, handlers in sorted(declaring.items()):
            if name not in imported:
                self.add("handlers", BLOCKER, f"{', '.join(map(repr, handlers))} declared in {name} "
                         f"({self.source.modules[name].rel}), which the app never imports: after a crash the "
                         "recovery daemon cannot run it, and the saga is held instead of undone",
                         f"add {name!r} to saga_lifespan(handlers=[...]) or import it from the app")

    def named_but_missing(self, declared: Mapping[str, str]) -> None:
        for module in self.source.modules.values():
            for node in ast.walk(module.tree):
                names: list[str] = []
                if isinstance(node, ast.Call):
                    value = _keyword(node, "handler")
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        names.append(value.value)
                elif isinstance(node, ast.Dict):
                    names += [v.value for k, v in zip(node.keys, node.values, strict=True)
                              if isinstance(k, ast.Constant) and k.value == "handler"
                              and isinstance(v, ast.Constant) and isinstance(v.value, str)]
                for name in names:
                    if name not in declared:
                        self.add("handlers", BLOCKER, f"{self.where(module, node)} names the undo {name!r}, "
                                 "and no @compensator of that name is declared in the project",
                                 f"declare it: @compensator({name!r}) on the function that undoes it")

    def todos(self) -> None:
        for directory, subdirs, files in os.walk(self.root):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in ("node_modules", "__pycache__"))
            for name in sorted(files):
                if not (name.endswith(_TODO_FILES) or name.startswith(("Dockerfile", "compose", "docker-compose"))):
                    continue
                path = Path(directory) / name
                try:
                    lines = path.read_text(encoding="utf-8").splitlines()
                except (OSError, UnicodeDecodeError):
                    continue
                for number, line in enumerate(lines, 1):
                    if TODO_MARK in line:
                        said = _todo_text(lines, number - 1)
                        self.add("todo", BLOCKER, f"{path.relative_to(self.root)}:{number}: undecided: {said}",
                                 "decide it, then remove the marker")


_COMMENT = re.compile(r"^\s*(#|//|;)\s?")
_SENTENCE_END = (".", "!", "?")
_MOST_LINES = 8  # a marker's text is a decision to make, not a page


def _todo_text(lines: list[str], index: int) -> str:
    """The marker's whole sentence: a comment that goes on over the next lines is read to its end.

    Only the marker's line was read before, so a finding stopped mid-sentence
    ("reads only"). The text runs on through the comment lines right below, with
    the same comment leader, to the first that ends a sentence.
    """
    line = lines[index]
    said = line.split(TODO_MARK, 1)[1].lstrip(": ").strip()
    leader = _COMMENT.match(line)
    if leader is None or not said or said.endswith(_SENTENCE_END):
        return said
    for nxt in lines[index + 1:index + _MOST_LINES]:
        more = _COMMENT.match(nxt)
        rest = nxt[more.end():].strip() if more and more.group(1) == leader.group(1) else ""
        if not rest or TODO_MARK in rest:
            break
        said = f"{said} {rest}"
        if rest.endswith(_SENTENCE_END):
            break
    return said


def diagnose(
    root: Path, replicas: int, env: Mapping[str, str], wal: str | None = None, *, deploy: bool = False,
) -> list[Finding]:
    """Every finding for the project at ``root`` run as ``replicas`` replicas with ``env`` (``deploy``: as a deployment)."""
    return _Doctor(root, replicas, env, wal, deploy).run()


def run_doctor(args: argparse.Namespace) -> int:
    """Check the project in the current directory (its source, parsed, never imported), the environment
    and the log: an in-memory or unchosen log, a kill switch or limit store each replica keeps to
    itself, undos the recovery daemon would not import, a log others can read, unchained or holding
    secrets in clear, and every TODO(agent-saga) left undecided.
    """
    if args.replicas < 1:
        raise CliError(f"--replicas must be at least 1, got {args.replicas}", EXIT_USAGE)
    root = Path(args.root)
    if not root.is_dir():
        raise CliError(f"--root {root}: not a directory")
    findings = diagnose(root, args.replicas, os.environ, args.wal_path, deploy=args.deploy)
    blockers = sum(f.level == BLOCKER for f in findings)
    warnings = len(findings) - blockers
    if args.json:
        print(json.dumps({"replicas": args.replicas, "blockers": blockers, "warnings": warnings,
                          "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        for f in sorted(findings, key=lambda f: f.level != BLOCKER):
            # A finding quotes project files and log records: shown inert, one line each.
            print(f"{f.level:8} {f.check}: {inert(f.message)}")
            print(f"{'':8} fix: {inert(f.fix)}")
        print(f"{blockers} blocker(s), {warnings} warning(s) for {args.replicas} replica(s)")
    return EXIT_FINDING if blockers else EXIT_OK
