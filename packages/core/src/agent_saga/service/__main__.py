"""``python -m agent_saga.service APP [uvicorn options]``: uvicorn, with an honest exit status.

uvicorn handles SIGTERM gracefully — the app's lifespan shuts down, and ``saga_lifespan``
drains the sagas still running — and then (since 0.29) re-raises the signal with whatever
handler was in place before it started, so by default a perfectly drained process reports
"killed by SIGTERM" (143), which an orchestrator cannot tell from a crash. Started from
here, that re-raised signal ends the process with 0 when the drain finished, and 1 when it
had to leave sagas running (the recovery daemon takes those over once their leases
expire). Every option is uvicorn's own (``--host``, ``--port``, ``--fd``, ...).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

__all__ = ["main"]


def _after_shutdown(signum: int, frame: FrameType | None) -> None:
    from agent_saga.service import _lifespan as lifespan

    left = lifespan.last_drain_left
    sys.exit(1 if left else 0)


def main(argv: list[str] | None = None) -> None:
    try:
        import uvicorn
    except ImportError:
        sys.exit("python -m agent_saga.service needs uvicorn: pip install 'agent-saga[fastapi]>=3.0.0' uvicorn")
    # Installed before uvicorn starts, so it is the handler uvicorn puts back and re-raises to.
    signal.signal(signal.SIGTERM, _after_shutdown)
    uvicorn.main.main(args=sys.argv[1:] if argv is None else argv, prog_name="python -m agent_saga.service")


if __name__ == "__main__":
    main()
