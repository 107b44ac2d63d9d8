"""docs/MIGRATING.md against the code: its 3.x names exist, and what it calls removed is not exported.

The 2.3.11 names themselves were read from that release's wheel once (the page says how);
the test cannot download it, so it checks the page's own table: 222 rows, one per name.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import agent_saga
from agent_saga._migrating import GONE

DOC = (Path(__file__).resolve().parents[3] / "docs" / "MIGRATING.md").read_text(encoding="utf-8")
TABLE = DOC[DOC.index("| 2.x name | 2.x module | in 3.0.0 |"):]
ROWS = [line for line in TABLE.splitlines()[2:] if line.startswith("| `")]


def resolve(dotted: str) -> Any:
    """The object a dotted 3.x name in the page means (module, attribute, or class attribute)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{dotted} does not import")


def test_the_table_has_a_row_for_each_of_the_222_names() -> None:
    names = [re.match(r"\| `([^`]+)`", row)[1] for row in ROWS]  # type: ignore[index]
    assert len(names) == 222 == len(set(names)), len(names)
    assert "exports 222 names" in DOC


def test_every_3x_name_the_page_gives_exists() -> None:
    for row in ROWS:
        now = row.split(" | ")[2]
        if "extra)" in now:  # imports a framework this env may not have: the name is listed, not loaded
            assert now.split("`")[1].rpartition(".")[2] in dir(agent_saga), row
            continue
        for dotted in re.findall(r"`(agent_saga(?:\.\w+)+)`", now):
            assert resolve(dotted) is not None, row
    for dotted in re.findall(r"`(agent_saga(?:\.\w+)+)`", DOC[:DOC.index("| 2.x name |")]):
        if not dotted.startswith("agent_saga.log.compact"):  # compact(path, ...) is a call, resolved below
            assert resolve(dotted) is not None, dotted
    assert callable(resolve("agent_saga.log.compact"))


def test_same_name_rows_are_at_the_top_level_and_moved_rows_are_not() -> None:
    for row in ROWS:
        name = re.match(r"\| `([^`]+)`", row)[1]  # type: ignore[index]
        now = row.split(" | ")[2]
        if "(same name)" in now or now.startswith(f"`agent_saga.{name}`"):
            assert name in agent_saga.__all__ or name in dir(agent_saga), row
        if "(moved)" in now:
            assert name not in agent_saga.__all__, row


def test_what_the_page_calls_removed_is_not_exported() -> None:
    removed = [re.match(r"\| `([^`]+)`", row)[1] for row in ROWS if " | removed" in row]  # type: ignore[index]
    assert len(removed) > 100
    exported: set[str] = set(agent_saga.__all__)
    for module in ("agent_saga.gate", "agent_saga.log", "agent_saga.recovery", "agent_saga.audit",
                   "agent_saga.approvals", "agent_saga.isolation", "agent_saga.proving", "agent_saga.registry",
                   "agent_saga.runtime"):
        exported |= set(importlib.import_module(module).__all__)
    assert not [name for name in removed if name in exported and name != "Verdict"]


def test_every_name_2x_exported_and_3x_lacks_answers_in_one_line_with_what_the_page_says() -> None:
    answered = 0
    for row in ROWS:
        name, module, now = (cell.strip().strip("`") for cell in row.strip("|").split(" | "))
        if name in dir(agent_saga):
            continue
        try:
            getattr(agent_saga, name)
        except AttributeError as missing:
            text = str(missing)
            assert ("\n" not in text and "docs/MIGRATING.md" in text) or "lives in" in text, text
            if "lives in" not in text:  # _MOVED's answer names the new home itself
                assert text == f"agent_saga.{name} was exported by agent-saga 2.x ({module}); " \
                               f"in 3.x: {now.replace('`', '')} (docs/MIGRATING.md)"
                answered += 1
    assert answered == len(GONE) > 100  # every row the table gives has its answer, and no more


def test_the_seeds_names_without_a_behaviour_get_one_line_and_nothing_invented() -> None:
    import agent_saga as saga

    for name in ("omni", "learn", "create_future_agent"):
        with pytest.raises(AttributeError, match=rf"^agent_saga\.{name} was named by the agent-saga 2\.x README but "
                                                 r"never had a defined behaviour; 3\.x has no counterpart"):
            getattr(saga, name)
    with pytest.raises(AttributeError, match=r"^module 'agent_saga' has no attribute 'no_such_name'$"):
        saga.no_such_name  # noqa: B018 - an unknown name stays Python's plain error


def test_a_from_import_of_a_2x_name_keeps_the_line_python_would_drop() -> None:
    # Python turns an AttributeError raised for ``from m import X`` into a bare "cannot import
    # name 'X'": 2.x code writes exactly that statement, so it must get the line as an ImportError.
    with pytest.raises(ImportError, match=r"^agent_saga\.SagaConfig was exported by agent-saga 2\.x "
                                          r"\(agent_saga\.config\); in 3\.x: removed: no counterpart"):
        from agent_saga import SagaConfig  # noqa: F401
    with pytest.raises(ImportError, match=r"^agent_saga\.omni was named by the agent-saga 2\.x README"):
        from agent_saga import omni  # noqa: F401
    with pytest.raises(ImportError, match=r"^agent_saga\.Rule lives in agent_saga\.gate since 3\.0"):
        from agent_saga import Rule  # noqa: F401
    # every other way of asking still gets the AttributeError (hasattr and getattr's default rely on it)
    assert not hasattr(agent_saga, "SagaConfig")
    assert getattr(agent_saga, "omni", None) is None
    with pytest.raises(ImportError, match=r"^cannot import name 'no_such_name' from 'agent_saga'"):
        from agent_saga import no_such_name  # noqa: F401


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a 2.x module 3.x lacks: the refusal under test
        return False


def test_importing_a_module_2x_had_and_3x_lacks_says_what_its_names_became() -> None:
    # 2.x code imports modules too (``from agent_saga.tenant import TenantContext``): Python's bare
    # "No module named" would leave the user to find the table; the line names each name's fate.
    gone_modules = sorted({module for module, _ in GONE.values() if not _has(module)})
    assert len(gone_modules) >= 40 and "agent_saga.gate" not in gone_modules
    for module in gone_modules:
        with pytest.raises(ModuleNotFoundError) as missing:
            importlib.import_module(module)
        text = str(missing.value)
        assert "\n" not in text and text.startswith(f"{module} was a module of agent-saga 2.x") and \
            text.endswith("(docs/MIGRATING.md)"), text
        assert missing.value.name == module and module not in sys.modules
        for name, (home, instead) in GONE.items():
            if home == module:
                assert name in text and instead in text, (name, text)
    with pytest.raises(ImportError, match=r"^agent_saga\.locks was a module of agent-saga 2\.x and 3\.x has none; .*"
                                          r"SemanticLockConflictError: agent_saga\.isolation\.LockHeld"):
        from agent_saga.locks import FileLock  # noqa: F401
    # a module 3.x still has is found as ever, and an unknown one keeps Python's own error
    assert importlib.import_module("agent_saga.gate").__name__ == "agent_saga.gate"
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'agent_saga\.no_such_module'$"):
        importlib.import_module("agent_saga.no_such_module")


def test_a_2x_name_of_a_module_3x_still_has_says_what_it_became() -> None:
    # ``from agent_saga.recovery import DanglingSaga``: the module is there, the name is not, and
    # Python's bare "cannot import name" would leave the user to find the table.
    kept = {home for home, _ in GONE.values() if _has(home)}
    assert len(kept) == 8 and "agent_saga.recovery" in kept
    for name, (home, instead) in GONE.items():
        module = importlib.import_module(home) if home in kept else None
        if module is None or name in vars(module):  # observability's formatters moved there
            continue
        line = f"{home}.{name} was exported by agent-saga 2.x; in 3.x: {instead} (docs/MIGRATING.md)"
        with pytest.raises(ImportError) as refused:
            exec(f"from {home} import {name}", {})  # the statement 2.x code has, compiled as such
        assert str(refused.value) == line and refused.value.name == name
        with pytest.raises(AttributeError) as missing:
            getattr(module, name)
        assert str(missing.value) == line
        assert not hasattr(module, name)
    # a name 2.x exported from another module, or none, keeps Python's own error
    recovery = importlib.import_module("agent_saga.recovery")
    with pytest.raises(AttributeError, match=r"^module 'agent_saga\.recovery' has no attribute 'SagaConfig'$"):
        recovery.SagaConfig  # noqa: B018
    with pytest.raises(ImportError, match=r"^cannot import name 'no_such_name' from 'agent_saga\.recovery'"):
        from agent_saga.recovery import no_such_name  # type: ignore[attr-defined]  # noqa: F401
    # a submodule not imported yet is still found by ``from package import submodule`` (which asks
    # the package's __getattr__ first): taken out of sys.modules for the statement, then put back
    earlier = sys.modules.pop("agent_saga.recovery.watch", None), recovery.__dict__.pop("watch", None)
    try:
        from agent_saga.recovery import watch

        assert watch.__name__ == "agent_saga.recovery.watch"
    finally:
        for key, value in zip(("agent_saga.recovery.watch", "watch"), earlier, strict=True):
            if value is not None:
                (sys.modules if "." in key else recovery.__dict__)[key] = value
