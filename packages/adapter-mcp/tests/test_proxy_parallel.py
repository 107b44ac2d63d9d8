"""The parallel case through the proxy: several tools/call in flight at once, the last one failing.

The MCP SDK's own client sends two bookings and a quote without waiting for any answer; the
quote fails once both bookings are running on the server; the client then calls
``saga_rollback`` (``--boundary explicit``). The orderings are forced as in
``agent_saga.testing._parallel``: each booking waits, on the server, for a record in the
proxy's log before it books (``servers/parallel_mcp_server.py``). Each run then checks the
server's own ledger (every booking cancelled), what the client was told (``clean`` only when
nothing stands), the log (every commit followed by its compensation) and that a recovery
sweep finds nothing to do.

``AGENT_SAGA_PARALLEL_RUNS=N`` runs every case N times (the stress lane).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import McpError, World, connect, error_flag

from agent_saga.log import read_records
from agent_saga.log.file import FileWAL
from agent_saga.log.records import RecordType as R
from agent_saga.testing._parallel import Verdict, log_problems, position, settled_as_they_landed, stress
from agent_saga.testing._shared import left_standing

pytestmark = pytest.mark.slow

SEATS = ("a", "b")
POLICY = {"mode": "enforce", "tools": {
    "book": {"semantics": "COMPENSABLE", "compensate": {"tool": "unbook", "args": {"ref": "$.ref"}}},
    "unbook": {"semantics": "IRREVERSIBLE"},
    "quote": {"semantics": "REVERSIBLE"},
}}


@dataclass(frozen=True)
class Scenario:
    """When the bookings commit, and how the client and the proxy are set up for it."""

    name: str
    release: str  # the record the bookings wait for in the proxy's log
    flags: tuple[str, ...] = ()  # more flags for the proxy
    awaits_all: bool = False  # the client reads every answer before it calls saga_rollback


#: The bookings commit once the rollback started, inside the default grace: it waits for them.
INSIDE_GRACE = Scenario("inside-grace", R.ROLLBACK_STARTED)
#: The bookings commit once the rollback ended (no grace): each is undone as its answer arrives.
AFTER_ROLLBACK = Scenario("after-rollback", R.SAGA_ROLLED_BACK, ("--rollback-grace", "0"))
#: The client waits for every answer, then rolls back: the bookings commit after the failure.
AFTER_FAILURE = Scenario("after-failure", R.STEP_UNKNOWN, awaits_all=True)


@dataclass
class Seen:
    """What one run showed: the client's answers and the problems found."""

    rollback: Any = None
    bookings: list[Any] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what the client saw go wrong


def _command(world: World, scenario: Scenario) -> list[str]:
    (world.root / "parallel-policy.json").write_text(json.dumps(POLICY))
    return ["agent-saga", "mcp", "--policy", "parallel-policy.json", "--boundary", "explicit", *scenario.flags,
            "--", "python", "-m", "parallel_mcp_server"]


async def _client(world: World, scenario: Scenario) -> Seen:
    seen = Seen()
    async with connect(_command(world, scenario), world) as client:
        await client.list_tools()
        bookings = [asyncio.ensure_future(client.call_tool("book", {"seat": seat})) for seat in SEATS]
        quote = await client.call_tool("quote", {"channel": "ops"})
        if not error_flag(quote):
            seen.problems.append(f"the quote did not fail: {quote}")
        if scenario.awaits_all:
            await asyncio.gather(*bookings, return_exceptions=True)
        seen.rollback = await client.call_tool("saga_rollback", {"reason": "the quote failed"})
        seen.bookings = await asyncio.gather(*bookings, return_exceptions=True)
    return seen


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))


def _lines(world: World, name: str) -> list[str]:
    path = world.dir / name
    return path.read_text().splitlines() if path.exists() else []


def parallel_run(world: World, scenario: Scenario) -> Verdict:
    """One run of ``scenario`` in a fresh world: what it left behind and every broken promise."""
    world.env.update({"PARALLEL_RELEASE": str(scenario.release), "PARALLEL_SIBLINGS": str(len(SEATS))})
    try:
        seen = asyncio.run(_client(world, scenario))
    except Exception as err:  # a broken promise is a finding, not a crash
        return Verdict(problems=[f"the run raised {type(err).__name__}: {err}"])
    problems = seen.problems
    problems += _lines(world, "stalls")
    verdict = Verdict(problems, left_standing(_lines(world, "ledger")), "clean=True" in _text(seen.rollback))
    if verdict.standing:
        problems.append(f"left standing on the server: {verdict.standing}")
    records = list(read_records(world.wal))
    books = sorted(r["step"] for r in records if r["type"] == R.STEP_INTENT and r["body"]["tool"] == "book")
    if len(books) != len(SEATS):
        problems.append(f"expected {len(SEATS)} booking steps, got {books}")
    if verdict.claimed_clean == error_flag(seen.rollback):
        problems.append(f"the rollback's answer flags isError={error_flag(seen.rollback)}: {_text(seen.rollback)}")
    check = _after_rollback if scenario is AFTER_ROLLBACK else _undone_in_the_rollback
    check(scenario, seen, records, books, verdict.claimed_clean, problems)
    wal = FileWAL(world.wal)
    try:
        problems += log_problems(wal, records)
    finally:
        wal.close()
    return verdict


def _undone_in_the_rollback(
    scenario: Scenario, seen: Seen, records: list[dict[str, Any]], books: list[int], clean: bool, problems: list[str],
) -> None:
    """The bookings committed before the rollback ended: it undid them, newest first, and says clean."""
    if not clean or "2 compensated" not in _text(seen.rollback):
        problems.append(f"the rollback answered: {_text(seen.rollback)}")
    undone = [r["step"] for r in records if r["type"] == R.STEP_COMPENSATED]
    if undone != sorted(books, reverse=True):
        problems.append(f"undone in the order {undone}, expected newest first {sorted(books, reverse=True)}")
    refs = [getattr(b, "structuredContent", None) or getattr(b, "structured_content", None) for b in seen.bookings]
    if sorted(str(ref) for ref in refs) != sorted(str({"ref": f"book:{seat}"}) for seat in SEATS):
        problems.append(f"the bookings were answered {seen.bookings}")
    commits = [position(records, R.STEP_COMMITTED, step) for step in books]
    rollback, ended = position(records, R.ROLLBACK_STARTED), position(records, R.SAGA_ROLLED_BACK)
    if scenario is INSIDE_GRACE and not rollback < min(commits) <= max(commits) < ended:
        problems.append("the bookings did not commit between ROLLBACK_STARTED and SAGA_ROLLED_BACK")
    if scenario is AFTER_FAILURE and not position(records, R.STEP_UNKNOWN) < min(commits) <= max(commits) < rollback:
        problems.append("the bookings did not commit after the failed quote and before the rollback")


def _after_rollback(
    scenario: Scenario, seen: Seen, records: list[dict[str, Any]], books: list[int], clean: bool, problems: list[str],
) -> None:
    """The bookings committed after the rollback ended: left in flight, then undone as each landed."""
    if clean or "2 unresolved" not in _text(seen.rollback):
        problems.append(f"the rollback answered: {_text(seen.rollback)}")
    for answer in seen.bookings:
        if not (isinstance(answer, McpError) and "in flight" in str(answer)):
            problems.append(f"a booking undone as it landed was answered {answer!r}, not with what became of it")
    problems += settled_as_they_landed(records, books)


@pytest.mark.parametrize("scenario", [INSIDE_GRACE, AFTER_ROLLBACK, AFTER_FAILURE], ids=lambda s: s.name)
def test_parallel_calls_through_the_proxy_leave_nothing_standing(world: World, scenario: Scenario) -> None:
    verdict = parallel_run(world, scenario)
    assert not verdict.problems, f"{scenario.name}:\n" + "\n".join(verdict.problems)


def test_parallel_stress(tmp_path: Path, record_property: Callable[[str, Any], None]) -> None:
    def case(scenario: Scenario) -> tuple[str, Callable[[int], Verdict]]:
        def run(n: int) -> Verdict:
            root = tmp_path / f"{scenario.name}-{n}"
            root.mkdir()
            return parallel_run(World(root), scenario)

        return scenario.name, run

    stress("mcp proxy", [case(s) for s in (INSIDE_GRACE, AFTER_ROLLBACK, AFTER_FAILURE)], record_property)
