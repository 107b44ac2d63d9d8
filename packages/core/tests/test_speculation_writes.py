"""Speculation never serves what the saga's own writes made stale (issue 39, point 5).

Seen before: a planned ``read_balance`` ran ahead (100), the saga transferred 60, and the
model's ``read_balance`` was served the held 100 (the balance was 40). What each test pins:

* a held guess is dropped (wasted, counted, the call made for real) when a non-REVERSIBLE step
  of its saga landed (COMMITTED, or UNKNOWN: it may have) after the guess began: whether the
  write committed while the guess ran or after it ended, was already in flight when it began,
  or ran through ``saga.execute`` rather than a wrapped tool;
* it is kept when the write landed before the guess began, never landed (NOT_APPLIED), is
  REVERSIBLE, or is still in flight when the agent's call runs (the two are concurrent);
* with ``touches=``, only guesses whose resources overlap the write's are dropped;
* a Hypothesis property over sequences of guesses, writes and reads checks each read against a
  model of the rule, and that a read is never served a value one of those writes changed.

Orderings are forced with events (a guess holds after it has read; a write holds before it acts).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    Compensation,
    ConfigurationError,
    MemoryWAL,
    NotApplied,
    SagaAborted,
    Speculator,
    compensator,
    inverse_of,
    planned_calls,
    saga_scope,
    tool,
)
from agent_saga.context import use_saga
from agent_saga.runtime import user_value

WAIT = 30  # seconds: a bound on a wait that a correct run ends at once, never a pause

_STALE = "the saga wrote after it began"


class Bank:
    """Balances; a REVERSIBLE read whose guesses can be held after reading; writes of each kind.

    A guess (its idempotency key starts with ``speculation:``) reads the balance, signals
    ``began[account]``, then waits on the release event current for that account when it began.
    A write can be held before it acts (clear ``write_gate``), so that it is in flight on demand.
    """

    def __init__(self, aio: bool = False) -> None:
        self.balances = {"A": 100, "B": 0, "C": 7}
        self.lock = threading.Lock()
        self.began = {name: threading.Event() for name in self.balances}
        self.releases = {name: self._released() for name in self.balances}
        self.real_reads: list[str] = []
        self.writing = threading.Event()  # a held write has started its forward
        self.write_gate = threading.Event()
        self.write_gate.set()

        def read(account: str, idempotency_key: str = "") -> int:
            with self.lock:
                value = self.balances[account]
                release = self.releases[account]
                if not idempotency_key.startswith("speculation:"):
                    self.real_reads.append(account)
            if idempotency_key.startswith("speculation:"):
                self.began[account].set()
                assert release.wait(WAIT), "a held guess was never released"
            return value

        def transfer(source: str, target: str, amount: int) -> dict[str, Any]:
            self.writing.set()
            assert self.write_gate.wait(WAIT), "a held write was never released"
            self.move(source, target, amount)
            return {"source": source, "target": target, "amount": amount}

        def undo(r: dict[str, Any]) -> Compensation:
            return Compensation(fn=functools.partial(self.move, r["target"], r["source"], r["amount"]))

        if aio:
            async def read_async(account: str, idempotency_key: str = "") -> int:
                return read(account, idempotency_key)

            async def transfer_async(source: str, target: str, amount: int) -> dict[str, Any]:
                return await asyncio.to_thread(transfer, source, target, amount)

            self.read_balance = tool(semantics="REVERSIBLE", name="read_balance")(read_async)
            self.transfer = tool(semantics="COMPENSABLE", compensate=undo, name="transfer")(transfer_async)
        else:
            self.read_balance = tool(semantics="REVERSIBLE", name="read_balance")(read)
            self.transfer = tool(semantics="COMPENSABLE", compensate=undo, name="transfer")(transfer)
        self.raw_transfer = transfer
        self.undo = undo

    @staticmethod
    def _released() -> threading.Event:
        event = threading.Event()
        event.set()
        return event

    def move(self, source: str, target: str, amount: int) -> None:
        with self.lock:
            self.balances[source] -= amount
            self.balances[target] += amount

    def hold_guesses(self, account: str) -> threading.Event:
        """From now on a guess of ``account`` holds after reading until the returned event is set."""
        with self.lock:
            self.began[account].clear()
            release = self.releases[account] = threading.Event()
        return release

    def guess(self, account: str, spec: Speculator) -> None:
        """Plan a read of ``account`` (the adapters' hook) and wait until the new guess has read."""
        self.began[account].clear()
        started = spec.stats.started
        assert len(planned_calls([("read_balance", {"account": account})])) == 1
        assert spec.stats.started == started + 1, "no new guess ran"
        assert self.began[account].wait(WAIT), "the guess never began"


def _finished(spec: Speculator) -> None:
    """Wait until every held guess has returned."""
    for held in list(spec._held.values()):
        held.future.result(WAIT)


def _redeemed(wal: MemoryWAL) -> list[dict[str, Any]]:
    return [dict(r) for r in wal.records() if r["type"] == "SPECULATION_REDEEMED"]


def _read_results(wal: MemoryWAL) -> list[Any]:
    """What the committed reads returned (a REVERSIBLE step's commit record names its tool)."""
    return [r["body"]["result"] for r in wal.records()
            if r["type"] == "STEP_COMMITTED" and r["body"].get("tool") == "read_balance"]


@contextmanager
def _saga(bank: Bank, **kw: Any) -> Iterator[tuple[Any, Speculator, MemoryWAL]]:
    wal = MemoryWAL()
    with saga_scope(wal=wal, gate=None) as run, Speculator([bank.read_balance], intent="turn-1", **kw) as spec:
        yield run, spec, wal


# -- the run ---------------------------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_read_guessed_before_the_sagas_transfer_is_not_served_after_it(face: str) -> None:
    bank = Bank(aio=face == "async")
    wal = MemoryWAL()
    async with saga_scope(wal=wal), Speculator([bank.read_balance], intent="turn-1") as spec:  # the default gate
        bank.guess("A", spec)
        _finished(spec)
        if face == "async":
            await bank.transfer("A", "B", 60)
            balance = await bank.read_balance("A")
        else:
            bank.transfer("A", "B", 60)
            balance = bank.read_balance("A")
        stats = dataclasses.replace(spec.stats)
    assert balance == 40  # not the 100 read ahead
    assert bank.real_reads == ["A"]
    assert stats.redeemed == 0 and stats.wasted == 1 and stats.reasons == {_STALE: 1}
    assert _redeemed(wal) == []
    assert _read_results(wal) == [40]


# -- forced orderings: what drops a guess ---------------------------------------------------


def test_a_write_that_commits_while_the_guess_runs_drops_it() -> None:
    bank = Bank()
    with _saga(bank) as (_run, spec, _wal):
        release = bank.hold_guesses("A")
        bank.guess("A", spec)  # it has read 100 and holds
        bank.transfer("A", "B", 60)  # committed before the guess returned
        release.set()
        _finished(spec)
        assert bank.read_balance("A") == 40
    assert spec.stats.redeemed == 0 and spec.stats.reasons == {_STALE: 1}


def test_a_write_in_flight_when_the_guess_began_that_commits_before_the_read_drops_it() -> None:
    """The write's step was open (PENDING) when the guess began: counting steps alone misses it."""
    bank = Bank()
    with _saga(bank) as (run, spec, _wal):
        bank.write_gate.clear()
        writer = threading.Thread(target=_in_saga(run, lambda: bank.transfer("A", "B", 60)))
        writer.start()
        assert bank.writing.wait(WAIT)  # in its forward, nothing moved yet
        bank.guess("A", spec)  # reads 100
        _finished(spec)
        bank.write_gate.set()
        writer.join(WAIT)
        assert not writer.is_alive()
        assert bank.read_balance("A") == 40
    assert spec.stats.redeemed == 0 and spec.stats.reasons == {_STALE: 1}


def _transfer_then_fail(bank: Bank, run: Any) -> None:
    """A wrapped tool whose call failed after acting: UNKNOWN, it may have landed."""

    @tool(semantics="COMPENSABLE", compensate=bank.undo)
    def transfer_then_fail(source: str, target: str, amount: int) -> dict[str, Any]:
        bank.move(source, target, amount)
        raise TimeoutError("the answer was lost")

    with pytest.raises(TimeoutError):
        transfer_then_fail("A", "B", 60)


def _transfer_by_saga_execute(bank: Bank, run: Any) -> None:
    """A step that never went through a wrapped tool: the speculator never saw the call."""
    run.execute(tool="ledger_transfer", forward=functools.partial(bank.raw_transfer, "A", "B", 60),
                semantics="IRREVERSIBLE", args={"source": "A", "target": "B", "amount": 60})


@pytest.mark.parametrize(("write", "state"), [(_transfer_then_fail, "UNKNOWN"), (_transfer_by_saga_execute, "COMMITTED")])
def test_a_write_that_landed_otherwise_than_by_committing_a_wrapped_tool_drops_the_guess(
    write: Callable[[Bank, Any], None], state: str
) -> None:
    bank = Bank()
    with _saga(bank) as (run, spec, _wal):
        bank.guess("A", spec)
        _finished(spec)
        write(bank, run)
        assert [s.state.value for s in run.steps] == [state]
        assert bank.read_balance("A") == 40
    assert spec.stats.redeemed == 0 and spec.stats.reasons == {_STALE: 1}


def test_the_same_call_planned_again_after_a_write_runs_ahead_again() -> None:
    """A stale guess is not handed back as "already running ahead": a fresh one replaces it."""
    bank = Bank()
    with _saga(bank) as (_run, spec, wal):
        bank.guess("A", spec)
        _finished(spec)
        bank.transfer("A", "B", 60)
        bank.guess("A", spec)  # reads 40
        _finished(spec)
        assert bank.read_balance("A") == 40
    assert bank.real_reads == []
    assert spec.stats.started == 2 and spec.stats.redeemed == 1 and spec.stats.reasons == {_STALE: 1}
    assert len(_redeemed(wal)) == 1


# -- forced orderings: what keeps a guess -------------------------------------------------


def test_a_write_that_committed_before_the_guess_began_keeps_it() -> None:
    bank = Bank()
    with _saga(bank) as (_run, spec, wal):
        bank.transfer("A", "B", 60)
        bank.guess("A", spec)
        _finished(spec)
        assert bank.read_balance("A") == 40
    assert bank.real_reads == [] and spec.stats.redeemed == 1 and spec.stats.wasted == 0
    assert len(_redeemed(wal)) == 1


def test_a_reversible_write_keeps_the_guess() -> None:
    """REVERSIBLE steps do not count as the saga's writes here (the rule is about effects that stand)."""
    bank = Bank()

    @tool(semantics="REVERSIBLE")
    def pencil_in(source: str, target: str, amount: int) -> None:
        bank.move(source, target, amount)

    with _saga(bank) as (_run, spec, _wal):
        bank.guess("A", spec)
        _finished(spec)
        pencil_in("A", "B", 60)
        assert bank.read_balance("A") == 100  # the held result, as before this change
    assert spec.stats.redeemed == 1 and spec.stats.wasted == 0


def test_a_write_that_did_not_happen_keeps_the_guess() -> None:
    bank = Bank()

    @tool(semantics="COMPENSABLE", compensate=bank.undo)
    def declined(source: str, target: str, amount: int) -> dict[str, Any]:
        raise NotApplied("the bank declined it")

    with _saga(bank) as (run, spec, _wal):
        bank.guess("A", spec)
        _finished(spec)
        with pytest.raises(NotApplied):
            declined("A", "B", 60)
        assert [s.state.value for s in run.steps] == ["NOT_APPLIED"]
        assert bank.read_balance("A") == 100
    assert spec.stats.redeemed == 1 and spec.stats.wasted == 0


def test_a_write_still_in_flight_when_the_agent_reads_keeps_the_guess() -> None:
    """The read and the write run at once: the read may see either side, and the guess is one of them."""
    bank = Bank()
    with _saga(bank) as (run, spec, _wal):
        bank.guess("A", spec)
        _finished(spec)
        bank.write_gate.clear()
        writer = threading.Thread(target=_in_saga(run, lambda: bank.transfer("A", "B", 60)))
        writer.start()
        assert bank.writing.wait(WAIT)
        assert bank.read_balance("A") == 100
        bank.write_gate.set()
        writer.join(WAIT)
        assert not writer.is_alive()
    assert spec.stats.redeemed == 1 and spec.stats.wasted == 0


class _RollBack(Exception):
    """Raised to end a test's run by rolling it back."""


@contextmanager
def _rolled_back() -> Iterator[None]:
    """The saga in the block ends rolled back by _RollBack (a failed assert inside is not taken for it)."""
    with pytest.raises(SagaAborted) as aborted:
        yield
    assert isinstance(aborted.value.__cause__, _RollBack), aborted.value.__cause__


def _in_saga(run: Any, call: Callable[[], Any]) -> Callable[[], None]:
    """``call`` on another thread, in the saga of ``run``."""
    def body() -> None:
        use_saga(run.saga)
        call()

    return body


# -- resources: only overlapping guesses are dropped -----------------------------------------

_BY_ACCOUNT = {
    "read_balance": lambda args: [f"account:{args['account']}"],
    "transfer": lambda args: {f"account:{args['source']}", f"account:{args['target']}"},
}


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_with_touches_only_the_guesses_a_write_overlaps_are_dropped(face: str) -> None:
    bank = Bank(aio=face == "async")

    async def call(result: Any) -> Any:
        return (await result) if face == "async" else result

    async with saga_scope(wal=MemoryWAL(), gate=None), Speculator(
        [bank.read_balance], intent="turn-1", touches=_BY_ACCOUNT
    ) as spec:
        for account in ("A", "C"):
            bank.guess(account, spec)
        _finished(spec)
        await call(bank.transfer("A", "B", 60))
        assert await call(bank.read_balance("C")) == 7  # redeemed: the transfer touched A and B
        assert await call(bank.read_balance("A")) == 40  # dropped
    assert bank.real_reads == ["A"]
    assert spec.stats.redeemed == 1 and spec.stats.reasons == {_STALE: 1}


def test_with_touches_a_write_whose_arguments_were_not_seen_drops_every_guess() -> None:
    """By saga.execute the speculator never sees a write's arguments: its resources are unknown."""
    bank = Bank()
    with _saga(bank, touches=_BY_ACCOUNT) as (run, spec, _wal):
        bank.guess("C", spec)
        _finished(spec)
        run.execute(tool="transfer", forward=functools.partial(bank.raw_transfer, "A", "B", 60),
                    semantics="COMPENSABLE", compensate=bank.undo, args={"source": "A", "target": "B", "amount": 60})
        assert bank.read_balance("C") == 7
    assert spec.stats.redeemed == 0 and spec.stats.reasons == {_STALE: 1}


def test_with_touches_fixed_keys_scope_a_write_run_by_saga_execute() -> None:
    bank = Bank()
    touches = {"read_balance": {"balances"}, "ledger_transfer": ["balances"], "read_rate": frozenset({"fx"})}

    @tool(semantics="REVERSIBLE")
    def read_rate(pair: str) -> float:
        return 1.25

    with saga_scope(wal=MemoryWAL(), gate=None) as run, Speculator(
        [bank.read_balance, read_rate], intent="turn-1", touches=touches
    ) as spec:
        planned_calls([("read_rate", {"pair": "EURUSD"}), ("read_balance", {"account": "C"})])
        _finished(spec)
        run.execute(tool="ledger_transfer", forward=functools.partial(bank.raw_transfer, "A", "B", 60),
                    semantics="IRREVERSIBLE", args={})
        assert read_rate("EURUSD") == 1.25  # redeemed: fx is not balances
        assert bank.read_balance("C") == 7  # dropped: the same resource
    assert spec.stats.redeemed == 1 and spec.stats.reasons == {_STALE: 1}


def test_a_touches_function_that_fails_counts_as_touching_everything() -> None:
    bank = Bank()
    touches = {**_BY_ACCOUNT, "transfer": lambda args: [args["no such argument"]]}
    with _saga(bank, touches=touches) as (_run, spec, _wal):
        bank.guess("C", spec)
        _finished(spec)
        bank.transfer("A", "B", 60)  # the agent's call is not failed by it
        assert bank.read_balance("C") == 7
    assert spec.stats.redeemed == 0
    assert spec.stats.reasons == {"touches['transfer'] failed: KeyError": 1, _STALE: 1}


def test_a_wrapped_write_keeps_its_pairing_and_gets_plain_values() -> None:
    """The speculator wraps a write's forward to learn its step: the engine must still find the
    @inverse_of pairing and take the tags off the arguments, as it does on the forward itself."""
    undone: list[str] = []
    seen: list[Any] = []

    def book(seat: str) -> dict[str, str]:
        seen.append(seat)
        return {"seat": seat}

    @inverse_of(book, maps={"seat": "seat"})
    @compensator("test_speculation_writes.unbook")
    def unbook(seat: str) -> None:
        undone.append(seat)

    booked = tool(semantics="COMPENSABLE")(book)
    bank = Bank()
    with _rolled_back(), _saga(bank, touches={"book": lambda args: [args["seat"]]}):
        booked(user_value("12A", "request-1"))
        raise _RollBack
    assert seen == ["12A"] and undone == ["12A"]


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("touches", "says"),
    [
        (["read_balance"], "maps each tool's name"),
        ({"read_balance": "account"}, "'read_balance'"),
        ({"read_balance": ["account", 3]}, "'read_balance'"),
        ({"read_balance": 3}, "'read_balance'"),
        ({3: ["account"]}, "3"),
    ],
)
def test_touches_that_is_not_a_mapping_of_names_to_keys_is_one_clear_line(touches: Any, says: str) -> None:
    bank = Bank()
    with pytest.raises(ConfigurationError, match="touches=") as err:
        Speculator([bank.read_balance], intent="turn-1", touches=touches)
    message = str(err.value)
    assert says in message and "\n" not in message


# -- the property ------------------------------------------------------------------------------

_ACCOUNTS = ("A", "B")  # two: a write and a guess meet on one account often, and miss often
_SEMANTICS = ("REVERSIBLE", "COMPENSABLE", "IRREVERSIBLE")
_op = st.one_of(
    st.tuples(st.just("guess"), st.sampled_from(_ACCOUNTS)),
    st.tuples(st.just("finish"), st.sampled_from(_ACCOUNTS)),
    st.tuples(st.just("read"), st.sampled_from(_ACCOUNTS)),
    st.tuples(
        st.just("write"), st.sampled_from(_ACCOUNTS), st.sampled_from(_SEMANTICS),
        st.sampled_from(("lands", "lands then fails", "does not happen")), st.sampled_from(("tool", "execute")),
    ),
)


@dataclasses.dataclass
class _Guess:
    """The model's view of a held guess."""

    value: int  # what it read
    release: threading.Event
    stale: bool = False
    moved: int = 0  # what REVERSIBLE writes added to its account since it began


class _Model:
    """Drives one run op by op, and says what each read must return under the rule."""

    def __init__(self, bank: Bank, run: Any, spec: Speculator, scoped: bool) -> None:
        self.bank, self.run, self.spec, self.scoped = bank, run, spec, scoped
        self.held: dict[str, _Guess] = {}
        self.deposits = {s: _deposit(bank, s) for s in _SEMANTICS}
        self.started = self.redeemed = 0

    def guess(self, account: str) -> None:
        held = self.held.get(account)
        if held is not None and not held.stale:
            assert planned_calls([("read_balance", {"account": account})])  # the held one, not run again
            return
        if held is not None:
            held.release.set()  # the stale one is dropped: let it end
        release = self.bank.hold_guesses(account)
        self.bank.guess(account, self.spec)
        self.started += 1
        self.held[account] = _Guess(self.bank.balances[account], release)

    def finish(self, account: str) -> None:
        held = self.held.get(account)
        if held is not None:
            held.release.set()

    def read(self, account: str) -> None:
        held = self.held.pop(account, None)
        if held is not None:
            held.release.set()  # the agent's call would wait for it
        value = self.bank.read_balance(account)
        if held is not None and not held.stale:
            self.redeemed += 1
            assert value == held.value == self.bank.balances[account] - held.moved
        else:
            assert value == self.bank.balances[account]

    def write(self, account: str, semantics: str, outcome: str, path: str) -> None:
        _write(self.run, self.deposits[semantics], account, semantics, outcome, path)
        if outcome == "does not happen":
            return
        for name, held in self.held.items():
            if semantics == "REVERSIBLE":
                held.moved += 10 if name == account else 0
            elif not self.scoped or path == "execute" or name == account:
                held.stale = True  # by saga.execute the speculator never sees the account written

    def release_all(self) -> None:
        for held in self.held.values():
            held.release.set()


@settings(max_examples=examples(300), deadline=None)
@given(ops=st.lists(_op, max_size=14), scoped=st.booleans())
def test_a_read_is_served_a_guess_only_when_no_write_of_the_saga_landed_on_it_since(
    ops: list[tuple[Any, ...]], scoped: bool
) -> None:
    """Each read against a model of the rule; and a served guess is never older than a non-REVERSIBLE
    write that changed its account (only REVERSIBLE writes may have moved the balance since)."""
    bank = Bank()
    touches = {"read_balance": _BY_ACCOUNT["read_balance"],
               **{f"deposit_{s}": (lambda args: [f"account:{args['account']}"]) for s in _SEMANTICS}}
    wal = MemoryWAL()
    with saga_scope(wal=wal, gate=None) as run, Speculator(
        [bank.read_balance], intent="turn-1", workers=len(_ACCOUNTS) * 2, touches=touches if scoped else None
    ) as spec:
        model = _Model(bank, run, spec, scoped)
        try:
            for kind, *args in ops:
                getattr(model, kind)(*args)
                assert (spec.stats.started, spec.stats.redeemed) == (model.started, model.redeemed)
        finally:
            model.release_all()  # never leave a guess holding: the speculator's close would wait for it
    assert len(_redeemed(wal)) == model.redeemed


def _deposit(bank: Bank, semantics: str) -> Callable[..., Any]:
    """A deposit of 10 into ``account``; ``outcome`` says whether it lands and whether it then fails."""

    def deposit(account: str, outcome: str) -> str:
        if outcome == "does not happen":
            raise NotApplied("declined")
        with bank.lock:
            bank.balances[account] += 10
        if outcome == "lands then fails":
            raise TimeoutError("the answer was lost")
        return account

    return tool(semantics=semantics, compensate=_no_undo(semantics), name=f"deposit_{semantics}")(deposit)


def _no_undo(semantics: str) -> Callable[[Any], Compensation] | None:
    """A COMPENSABLE step's undo that does nothing (the property never rolls back)."""
    return (lambda _result: Compensation(fn=lambda: None)) if semantics == "COMPENSABLE" else None


def _write(run: Any, deposit: Callable[..., Any], account: str, semantics: str, outcome: str, path: str) -> None:
    """The deposit as a wrapped tool call, or as a step run by saga.execute; its failure is the model's."""
    try:
        if path == "tool":
            deposit(account, outcome)
        else:
            run.execute(tool=f"deposit_{semantics}", forward=functools.partial(deposit.__wrapped__, account, outcome),
                        semantics=semantics, compensate=_no_undo(semantics),
                        args={"account": account, "outcome": outcome})
    except (NotApplied, TimeoutError):
        pass
