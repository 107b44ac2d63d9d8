"""RepairSession on PostgresWAL and RedisWAL: the same scenarios as test_repair.py's FileWAL ones.

The claim a session takes is the daemon's on that server (a Postgres advisory lock, a
Redis key), so a second operator on another connection is refused just as a daemon is.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))

import repair_world as world
from repair_checks import (
    OPERATOR,
    WHY,
    check_a_failed_continuation_unwinds_everything_once,
    check_a_second_open_is_refused,
    check_an_abandoned_repair_is_finished_by_the_daemon,
    check_the_seed_snippet,
    dead_onboarding,
    repair_world,
)

from agent_saga import KillSwitch, PreFlightGate, RecoveryDaemon, SagaQuarantined, saga_scope
from agent_saga.cli.main import main
from agent_saga.gate import FileSwitchStore
from agent_saga.recovery.lease import configure_leases, lease_keeper
from agent_saga.recovery.server_leases import server_leases

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("repair_world")


async def test_the_seed_snippet_runs_with_a_real_continuation(server_wal: object, url: str) -> None:
    await check_the_seed_snippet(server_wal, url)  # type: ignore[arg-type]


async def test_a_failed_continuation_unwinds_the_whole_transaction_once(server_wal: object) -> None:
    await check_a_failed_continuation_unwinds_everything_once(server_wal, server_wal)  # type: ignore[arg-type]


async def test_a_second_operator_on_another_connection_is_refused(server_wal: object, url: str) -> None:
    # The first operator holds the log object; the second names it by URL (a connection of its own).
    await check_a_second_open_is_refused(server_wal, server_wal, url)  # type: ignore[arg-type]


async def test_an_abandoned_repair_is_unwound_by_the_daemon(server_wal: object) -> None:
    await check_an_abandoned_repair_is_finished_by_the_daemon(server_wal, server_wal)  # type: ignore[arg-type]


async def test_the_cli_repairs_a_saga_on_a_server_log(
    server_wal: object, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    keeper = lease_keeper()
    old = keeper.ttl
    configure_leases(0.3)
    try:
        saga_id = await dead_onboarding(server_wal)  # type: ignore[arg-type]
        server_leases().abandoned(saga_id, server_wal)  # the process "died": nobody renews its lease
    finally:
        configure_leases(old)
    await asyncio.sleep(0.5)
    assert await asyncio.to_thread(main, ["repair", saga_id[:10], "--operator", OPERATOR, "--reason", WHY,
                                          "--lease-grace", "0", "--wal-path", url]) == 0
    assert "blockers: none" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["repair", saga_id[:10], "--operator", OPERATOR, "--reason", WHY,
                                          "--lease-grace", "0", "--wal-path", url, "--abandon"]) == 0
    assert "handed back" in capsys.readouterr().out
    with RecoveryDaemon(url, lease_grace=0) as daemon:
        assert daemon.sweep().recovered == [saga_id]
    assert world.undone("stripe.refund") == ["ch-acct-ada@example.com-4200"]


async def test_a_quarantined_saga_stops_renewing_its_server_lease(server_wal: object, tmp_path: Path) -> None:
    """As on a file log: once frozen, this process keeps no lease alive, so repair need not wait for it to die."""
    switch = KillSwitch(FileSwitchStore(tmp_path / "switch.json"), poll_interval=0, wal=server_wal)  # type: ignore[arg-type]
    with pytest.raises(SagaQuarantined):
        async with saga_scope(server_wal, gate=PreFlightGate([], switch=switch), name="onboarding") as saga:  # type: ignore[arg-type]
            await world.account_and_charge(saga)
            assert saga.saga_id in server_leases().held()
            switch.quarantine(saga.saga_id, reason="odd postcodes", by="soc@example.com")
            await world.address(saga, "acct-ada@example.com", "SW1A1AA")
    assert saga.saga_id not in server_leases().held()
