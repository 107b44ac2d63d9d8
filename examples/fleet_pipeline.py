"""SagaFleet: one saga for tools that run on threads which do not carry it.

    python examples/fleet_pipeline.py

A content pipeline's tools run where agent frameworks put them: the researcher's on a bare
``threading.Thread``, the writer's and the reviewer's on a thread pool through
``loop.run_in_executor`` (as AutoGen runs a sync tool). Neither copies the caller's context, so
``current_saga()`` is None there and a tool made a step with ``@agent_saga.tool`` alone would
run unprotected. Registered with a ``SagaFleet``, each tool finds the fleet's open transaction
on whatever thread it runs; the notification fails and the draft and the budget are undone,
newest first. ``assert_fully_covered()`` is the gate for CI: every registered tool with an undo
another process can run after a crash. No framework needed to run it; the log lands in
./fleet-pipeline.wal.

Needs: pip install -e ./packages/core
"""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_saga import FileWAL, NotApplied, SagaAborted, SagaFleet, compensator, current_saga
from agent_saga.log import read_records

WORLD: dict[str, Any] = {"reservations": {}, "published": {}}


def reserve_budget(amount: int) -> dict[str, str]:
    """Reserve research budget."""
    WORLD["reservations"]["res_1"] = amount
    print(f"    reserved {amount} -> res_1   (on {threading.current_thread().name})")
    return {"reservation_id": "res_1"}


def publish_draft(title: str) -> dict[str, str]:
    """Publish the draft."""
    WORLD["published"]["doc_1"] = title
    print(f"    published {title!r} -> doc_1   (on {threading.current_thread().name})")
    return {"doc_id": "doc_1"}


def notify(channel: str) -> None:
    """Notify the reviewers."""
    raise NotApplied("notification service unreachable")  # refused: nothing was sent


@compensator("pipeline.release")  # called with the result's field of the same name
def release(reservation_id: str) -> None:
    WORLD["reservations"].pop(reservation_id)
    print(f"    released {reservation_id}")


@compensator("pipeline.unpublish")
def unpublish(doc_id: str) -> None:
    WORLD["published"].pop(doc_id)
    print(f"    unpublished {doc_id}")


fleet = SagaFleet("content-pipeline")
reserve = fleet.register(reserve_budget, framework="crewai", name="research.reserve",
                         semantics="COMPENSABLE", compensate=release)
publish = fleet.register(publish_draft, framework="langgraph", name="writer.publish",
                         semantics="COMPENSABLE", compensate=unpublish)
send = fleet.register(notify, framework="autogen", name="reviewer.notify", semantics="IRREVERSIBLE")


async def on_bare_thread(fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)`` on a new ``threading.Thread`` (no context copied), awaited."""
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(result=fn(**kwargs)), name="bare-thread")
    thread.start()
    await asyncio.to_thread(thread.join)
    return done.get("result")


async def main() -> None:
    fleet.assert_fully_covered()  # the CI gate: raises CoverageError if an undo would die with the process
    for tool in fleet.coverage()["tools"]:
        print(f"  {tool['name']:<17} {tool['framework']:<10} {tool['semantics']:<12} "
              f"recoverable after a crash: {tool['recoverable_after_crash']}")
    Path("fleet-pipeline.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("fleet-pipeline.wal")
    loop = asyncio.get_running_loop()
    try:
        with ThreadPoolExecutor(thread_name_prefix="pool") as pool:
            async with fleet.transaction(wal=wal):
                seen = await on_bare_thread(lambda: current_saga() is not None)
                print(f"  inside the transaction, a bare thread sees the saga by itself: {seen}")
                await on_bare_thread(reserve, amount=5000)
                await loop.run_in_executor(pool, lambda: publish(title="Q3"))
                await loop.run_in_executor(pool, lambda: send(channel="reviews"))
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"  sagas in the log: {len({r['saga'] for r in read_records('fleet-pipeline.wal')})}")
    print(f"  world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
