"""Readiness: may this replica take traffic? Each safety signal is read now, and fails closed.

A signal that cannot be read counts as not ready, so a replica whose log is broken or
whose kill switch it cannot see never joins the load balancer. What an operator
*chose* (a halt, a drain, pending escalations) is reported but does not make the
replica unready: those stop agents, not the service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent_saga.context import default_gate
from agent_saga.log.base import WAL

__all__ = ["check", "kill_switch_signal", "log_signal"]

Signal = dict[str, Any]


def log_signal(wal: WAL) -> Signal:
    """The log: durable, not closed, not broken by an earlier write."""
    broken = getattr(wal, "broken", None)
    if broken is not None:
        return {"ok": False, "location": wal.location, "detail": f"broken: {broken}"}
    if getattr(wal, "closed", False):
        return {"ok": False, "location": wal.location, "detail": "closed"}
    if not wal.durable:
        return {"ok": False, "location": wal.location, "detail": "not durable: a crash loses every open saga's undo"}
    return {"ok": True, "location": wal.location, "detail": "durable"}


def kill_switch_signal() -> Signal:
    """The kill switch the default gate obeys: every one of its stores read now."""
    switch = getattr(default_gate(), "switch", None)
    if switch is None:
        return {"ok": True, "detail": "the default gate consults no kill switch"}
    stores: list[str] = []
    halted: list[str] = []
    for source in switch.sources:
        stores.append(source.location)
        try:
            state = source.load().live(time.time())  # expired halts are not halts
        except Exception as err:  # noqa: BLE001 - an unreadable switch is a failed signal, whatever the error
            return {"ok": False, "stores": stores, "detail": f"cannot read {source.location}: {err}"}
        halted += [h.scope for h in state.halts] + (["drain"] if state.drain is not None else [])
    detail = f"halted: {', '.join(sorted(set(halted)))}" if halted else "readable, nothing halted"
    return {"ok": True, "stores": stores, "detail": detail}


def check(signals: dict[str, Callable[[], Signal]]) -> tuple[bool, dict[str, Signal]]:
    """Read every signal; one that raises is a failed signal, not a crash of the probe."""
    read: dict[str, Signal] = {}
    for name, signal in signals.items():
        try:
            read[name] = signal()
        except Exception as err:  # noqa: BLE001
            read[name] = {"ok": False, "detail": f"unreadable: {type(err).__name__}: {err}"}
    return all(s.get("ok") is True for s in read.values()), read
