"""What ``import agent_saga`` installs for every saga, run on first use instead of at import.

The package installs three process-wide defaults: the default gate (an operator's kill
switch holds with no configuration, docs/GATE.md) and the leases that let a recovery
daemon tell a live saga from a dead one (local and server logs). Installing them
imported the gate, the engine and recovery, a quarter of a second of ``import
agent_saga``. So the package names them here (module and function, as strings: this
module imports nothing of agent_saga), and :func:`ensure` runs them once, before
anything reads or changes what they install: the default gate (``context``) and the
saga lifecycle hooks (``engine.ports``), both of which call it first.
"""

import _thread  # not threading: this module is imported by ``import agent_saga``, and small

__all__ = ["defer", "ensure"]

_pending: list[tuple[str, str, str | None]] = []
_lock = _thread.RLock()
_running = False


def defer(module: str, function: str, *, wing: str | None = None) -> None:
    """Have :func:`ensure` call ``module.function()`` (once) before the first saga.

    ``wing``: the package ``module`` belongs to, when it is a wing rather than the kernel.
    The kernel runs without its wings (a test blocks them all), so when that package
    itself cannot be found, there is nothing of it to install and the call is skipped;
    any other failure to import ``module`` is raised as before.
    """
    with _lock:
        if not any(entry[:2] == (module, function) for entry in _pending):
            _pending.append((module, function, wing))


def ensure() -> None:
    """Run what was deferred, once; every thread returns only after it all ran."""
    if not _pending:
        return
    from importlib import import_module

    global _running
    with _lock:
        if _running:  # an installer reached a caller of ensure (set_default_gate): let it through
            return
        _running = True
        try:
            while _pending:
                module, function, wing = _pending[0]
                try:
                    installer = getattr(import_module(module), function)
                except ModuleNotFoundError as missing:
                    if wing is None or missing.name != wing:
                        raise
                else:
                    installer()
                del _pending[0]  # only once it ran: a failed install is tried again next time
        finally:
            _running = False
