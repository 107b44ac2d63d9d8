"""``agent-saga-temporal resolve`` and ``export`` as commands, against a job waiting for a person."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agent_saga_temporal import settled
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import SCRIPT
from conftest import open_order, start, worker

from agent_saga.log import read_records

CLI = str(Path(sys.executable).with_name("agent-saga-temporal"))


async def command(*args: str) -> tuple[int, str, str]:
    # Run without blocking the loop: this process's worker must keep serving the job meanwhile.
    process = await asyncio.create_subprocess_exec(
        CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_resolve_and_export_from_the_command_line(
    provider: Provider, temporal_address: str, tmp_path: Path
) -> None:
    order_id = open_order(provider, "refund-fails")
    wal = tmp_path / "job.wal"
    async with worker(temporal_address, SCRIPT) as (client, queue):
        handle = await start(client, queue, order_id)
        assert (await settled(handle)).status == "waiting_for_person"
        where = ["--address", temporal_address, "--workflow-id", handle.id]

        code, _, err = await command("resolve", *where, "--decision", "accept", "--by", " ")
        assert code == 2 and "by must name the person who decides" in err
        code, out, err = await command("resolve", *where, "--decision", "accept", "--by", "ops", "--note", "by hand")
        assert code == 0, err
        assert out.strip() == f"{handle.id}: resolved_by_person"
        code, _, err = await command("resolve", *where, "--decision", "retry", "--by", "ops")
        assert code == 2 and "workflow execution already completed" in err, err  # it is over

    # The export reads the history from the server: no worker needs to run.
    code, out, err = await command("export", *where, "--wal-path", str(wal))
    assert code == 0, err
    assert "(resolved_by_person)" in out
    code, _, err = await command("export", *where, "--wal-path", str(wal))
    assert code == 3 and "already holds saga" in err
    assert [r["type"] for r in read_records(wal)][-2:] == ["ESCALATION_RESOLVED", "SAGA_ROLLED_BACK"]
    code, _, err = await command("export", "--address", "127.0.0.1:1", "--workflow-id", "x", "--wal-path", str(wal))
    assert code == 3 and "cannot reach Temporal at 127.0.0.1:1" in err
