"""The service's ledger: one claim per key, one undo per key, and a fenced key never runs."""

from __future__ import annotations

import threading
from pathlib import Path

from agent_saga.distributed import Ledger, SagaContext

CONTEXT = SagaContext("ab" * 16, 1, "cd" * 16)


def test_of_many_concurrent_claims_of_one_key_exactly_one_wins(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    results: list[object] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        results.append(ledger.claim(CONTEXT))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(None) == 1
    assert {e.state for e in results if e is not None} == {"running"}  # type: ignore[union-attr]


def test_a_served_key_is_kept_across_a_reopen_and_undone_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    assert ledger.claim(CONTEXT) is None
    ledger.finish(CONTEXT.key, "done", 200, "application/json", b"{}", "v1.t.s")
    again = Ledger(tmp_path / "ledger")  # a restarted process
    entry = again.claim(CONTEXT)
    assert entry is not None and (entry.state, entry.status, entry.body, entry.token) == ("done", 200, b"{}", "v1.t.s")
    assert again.begin_undo(CONTEXT.key) is True
    assert ledger.begin_undo(CONTEXT.key) is False  # the other process sees it taken
    again.end_undo(CONTEXT.key, True)
    assert ledger.get(CONTEXT.key).state == "compensated"  # type: ignore[union-attr]
    assert ledger.begin_undo(CONTEXT.key) is False


def test_a_fenced_key_is_never_claimed(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger")
    assert ledger.fence(CONTEXT.key).state == "fenced"
    entry = ledger.claim(CONTEXT)
    assert entry is not None and entry.state == "fenced"
    # A failed undo goes back to done, so it can be asked again.
    other = SagaContext("ab" * 16, 2, "ef" * 16)
    ledger.claim(other)
    ledger.finish(other.key, "done", 201, None, b"", "v1.t.s")
    assert ledger.begin_undo(other.key)
    ledger.end_undo(other.key, False)
    assert ledger.get(other.key).state == "done"  # type: ignore[union-attr]
