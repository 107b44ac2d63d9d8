"""Every Python block of README.md and docs/*.md runs as written, or says on its first line why not.

A reader copies a block into a file and runs it; so does this test, with Sybil
(https://sybil.readthedocs.io) finding the blocks. The blocks of one document run in
order in one namespace (a later block may use what an earlier one defined, as a
reader working down the page would), in a fresh interpreter per document, in an
empty working directory.

A block that cannot run on its own says so where the reader sees it, on its first line::

    # fragment: needs a Redis server (REDIS_URL)

The reason is required; a fragment is still compiled as a file is (no top-level ``await``)
and its ``agent_saga`` imports must resolve, so what a reader copies is at least valid Python.
Mark a block a fragment only when it needs something the docs env does not have (an
outside service, a framework, a placeholder the reader fills in); anything else runs.
New documents in docs/ are covered without edits here.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAGMENT = re.compile(r"^# fragment: (?P<why>\S.*)$")


_PRINT_SAYS = re.compile(r"^print\(.*\)\s+# (?P<said>.+)$")
_OUTPUT_LINE = re.compile(r"^# (?P<said>.+)$")


def shown_output(source: str) -> list[str]:
    """What a block says it prints: ``print(x)  # TEXT``, or ``# TEXT`` lines right under a ``print``.

    A trailing ``...`` stands for the rest of the line. The reader takes these comments as
    the output; they are checked against what the block printed.
    """
    said: list[str] = []
    after_print = False
    for line in source.splitlines():
        inline, below = _PRINT_SAYS.match(line), _OUTPUT_LINE.match(line)
        if inline:
            said.append(inline["said"])
        elif below and after_print:
            said.append(below["said"])
            continue
        after_print = line.startswith("print(")
    return [s.removesuffix("...").removesuffix("…").strip() for s in said]


def _doctest(source: str, name: str, namespace: dict[str, object], *, run: bool) -> None:
    """A block written as an interpreter session: each ``>>>`` line's output is checked (compiled only if a fragment)."""
    import doctest

    test = doctest.DocTestParser().get_doctest(source, namespace, name, name, 0)
    for step in test.examples:
        compile(step.source, name, "single")
    if not run:
        return
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=out.write, clear_globs=False)
    if runner.failures:
        raise AssertionError(out.getvalue())


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _unresolved_imports(tree: ast.Module) -> list[str]:
    """The ``agent_saga`` imports of a block that do not resolve: a module that does not exist, a name it lacks.

    Fragments too: a reader copies their imports. Other packages (a framework, an extra the docs
    env lacks) are not checked, nor an agent-saga module that exists but needs such an extra.
    """
    import importlib

    def exists(module: str) -> bool:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if "install it with" in str(err):  # agent_saga.adapters.<fw>: a distribution the docs env lacks
                return True
            return not (err.name and module.startswith(err.name))  # the module itself (or its package) is absent
        except ImportError:
            pass  # it exists and says which extra it needs
        return True

    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module, names = node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            missing += [alias.name for alias in node.names
                        if alias.name.split(".")[0] == "agent_saga" and not exists(alias.name)]
            continue
        else:
            continue
        if module.split(".")[0] != "agent_saga":
            continue
        if not exists(module):
            missing.append(module)
            continue
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        for name in names:
            try:
                getattr(found, name)
            except AttributeError:
                if not exists(f"{module}.{name}"):
                    missing.append(f"{module}.{name}")
            except ImportError:
                pass  # resolves, to an extra the docs env lacks
    return missing


def _run_document(path: Path) -> list[dict[str, object]]:
    """In this (fresh) interpreter: each Python block of ``path``, run in order; one result each."""
    from sybil import Document
    from sybil.parsers.markdown import CodeBlockParser

    results: list[dict[str, object]] = []

    def evaluate(example: object) -> None:
        source = str(example.parsed)  # type: ignore[attr-defined]
        line = example.line  # type: ignore[attr-defined]
        first = source.lstrip("\n").splitlines()[0] if source.strip() else ""
        fragment = FRAGMENT.match(first)
        try:
            if source.lstrip().startswith((">>>", "# fragment:")) and ">>> " in source:
                _doctest(source, f"{path.name}, block at line {line}", example.namespace,  # type: ignore[attr-defined]
                         run=not fragment)
                results.append({"line": line, **({"fragment": fragment["why"]} if fragment else {"ran": True})})
                return
            # A reader pastes the block into a file: top-level `await` would be a SyntaxError there.
            code = compile(source, f"{path.name}, block at line {line}", "exec")
            unresolved = _unresolved_imports(ast.parse(source))
            if unresolved:
                raise ImportError(f"the block imports what agent-saga does not have: {', '.join(unresolved)}")
            if fragment:
                results.append({"line": line, "fragment": fragment["why"]})
                return
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(code, example.namespace)  # type: ignore[attr-defined]
            sys.stderr.write(printed.getvalue())
            for said in shown_output(source):
                if said not in printed.getvalue():
                    raise AssertionError(f"the block says it prints {said!r}; it printed {printed.getvalue()!r}")
        except BaseException as err:  # reported, with the block's line
            results.append({"line": line, "error": f"{type(err).__name__}: {err}"})
            if not os.environ.get("DOCS_BLOCKS_GO_ON"):
                raise SystemExit(0) from None  # the later blocks may depend on this one: stop here
            return
        results.append({"line": line, "ran": True})

    document = Document.parse(str(path), CodeBlockParser(language="python", evaluator=evaluate))
    document.namespace["__name__"] = "__main__"
    try:
        for example in document.examples():
            example.evaluate()
    finally:
        print(json.dumps(results))
    return results


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_python_block_runs_or_is_a_declared_fragment(path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "examples")}
    env.pop("AGENT_SAGA_WAL", None)
    run = subprocess.run([sys.executable, __file__, str(path)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env, check=False)
    lines = run.stdout.strip().splitlines()
    assert lines, f"{path.name}: the runner printed nothing\n{run.stderr[-3000:]}"
    results = json.loads(lines[-1])
    failed = [f"{path.name}:{r['line']}: {r['error']}" for r in results if "error" in r]
    assert failed == [], "\n".join(failed) + "\n" + run.stderr[-3000:]
    assert run.returncode == 0, run.stderr[-3000:]


def run_blocks(path: Path, cwd: Path) -> list[dict[str, object]]:
    run = subprocess.run([sys.executable, __file__, str(path)], capture_output=True, text=True, timeout=300,
                         cwd=cwd, check=False)
    result: list[dict[str, object]] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_the_runner_reports_a_failing_block_checks_what_it_says_it_prints_and_compiles_fragments(
        tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nx = 2\nprint(x * 21)   # 42\n```\n\n"
        "```python\nprint('chain: intact')\n# chain: intact\n```\n\n"
        "```python\n# fragment: needs a server\nconnect(x)\n```\n\n"
        "```python\n# fragment:\nundefined_name\n```\n\n"
        "```python\nprint(x)   # 3\n```\n")
    assert run_blocks(doc, tmp_path) == [
        {"line": 1, "ran": True},
        {"line": 6, "ran": True},
        {"line": 11, "fragment": "needs a server"},
        {"line": 16, "error": "NameError: name 'undefined_name' is not defined"},  # no reason given: it ran
    ]
    doc.write_text("```python\n# fragment: broken\ndef f(:\n```\n\n```python\nprint(2)  # 3\n```\n")
    assert run_blocks(doc, tmp_path)[0]["error"].startswith("SyntaxError")  # type: ignore[union-attr]
    doc.write_text("```python\nprint(2)  # 3\n```\n")
    assert "the block says it prints '3'" in run_blocks(doc, tmp_path)[0]["error"]  # type: ignore[operator]


def test_a_fragment_is_valid_python_in_a_file_and_its_agent_saga_imports_resolve(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\n# fragment: needs a graph\nresult = await run(graph)\n```\n\n"
        "```python\n# fragment: needs a server\nfrom agent_saga.no_such import thing\n```\n\n"
        "```python\n# fragment: needs a server\nfrom agent_saga import saga_scope, no_such_name\n```\n\n"
        "```python\n# fragment: needs Stripe\nfrom agent_saga.connectors import stripe\nimport some_framework\n```\n")
    env = {**os.environ, "DOCS_BLOCKS_GO_ON": "1"}
    run = subprocess.run([sys.executable, __file__, str(doc)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env, check=False)
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert results[0]["error"].startswith("SyntaxError: 'await' outside function")  # as in a file a reader runs
    assert results[1]["error"].endswith("does not have: agent_saga.no_such")
    assert results[2]["error"].endswith("does not have: agent_saga.no_such_name")
    assert results[3] == {"line": 16, "fragment": "needs Stripe"}  # an extra or a framework the env lacks is fine


def test_a_fragment_says_why_on_its_first_line() -> None:
    assert FRAGMENT.match("# fragment: needs a Redis server")
    assert not FRAGMENT.match("# fragment:")  # no reason, no fragment: the block runs (and fails)
    assert not FRAGMENT.match("x = 1  # fragment: later")


def test_the_readmes_30_second_version_does_what_it_says(tmp_path: Path) -> None:
    """It used to define main() and never call it, around an undefined charge_card: it ran and did nothing."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The 30-second version", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "thirty_seconds.py"
    script.write_text(block)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         check=False)
    assert run.returncode == 0, run.stderr
    assert "refunded ch_1" in run.stdout  # the undo ran
    assert ": clean" in run.stdout and "1 compensated" in run.stdout  # and the report says so
    assert (tmp_path / "agent-saga.wal").stat().st_size > 0  # on the durable log the comment names


def test_the_scaffolds_test_count_in_service_md_is_the_scaffolds() -> None:
    """SERVICE.md says how many tests `agent-saga new` writes; the service env runs them ("5 passed")."""
    said = re.search(r"pytest\s+# (\d+) tests, pass on day one", (ROOT / "docs" / "SERVICE.md").read_text())
    assert said is not None
    templates = (ROOT / "packages/core/src/agent_saga/cli/scaffold/tests").glob("test_*.py.tmpl")
    written = sum(len(re.findall(r"^(?:async )?def test_", t.read_text(), re.M)) for t in templates)
    assert int(said.group(1)) == written


if __name__ == "__main__":
    _run_document(Path(sys.argv[1]))
