"""SagaOptions: every per-saga option, in one frozen type.

Each door that opens a saga (``saga_scope``, ``Boundary``, ``@guard``,
``AgentKit.transaction``, ``SagaFleet.transaction``, ``Adapter.boundary`` and the adapters'
run helpers) takes ``options=SagaOptions(...)`` and/or the same names as keywords, builds one
of these with :meth:`SagaOptions.build`, and hands it whole to :class:`~agent_saga.Boundary`,
which opens the :class:`~agent_saga.engine.saga.Saga` with it. A new saga option is added
here, once, and reaches every door. ``SagaKwargs`` is the same set of names as keyword
arguments (for ``**options`` signatures); a test keeps the two in step.

``saga_id`` is not an option: it names one run, and options are made to be reused (one
``SagaOptions`` for every run of a service); ``saga_scope`` and ``Boundary`` take it apart.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict

from agent_saga.engine.inflight import ROLLBACK_GRACE
from agent_saga.engine.ports import GatePort
from agent_saga.engine.retry import COMPENSATION_RETRY, RetryPolicy
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument

__all__ = ["SagaKwargs", "SagaOptions", "positional_wal", "saga_option_names", "split_saga_options"]


class SagaKwargs(TypedDict, total=False):
    """The saga options as keyword arguments."""

    name: str | None
    tags: Iterable[str]
    gate: GatePort | None
    wal: WAL | str | os.PathLike[str] | None
    wait_for_commit: bool
    compensation_retry: RetryPolicy
    halt_on_compensation_failure: bool
    rollback_grace: float


@dataclass(frozen=True, slots=True)
class SagaOptions:
    """How one saga behaves. Every field has a default; None means "the door's own".

    * ``name`` — the saga's name in the log (None: the door's: ``"saga"``, the guarded
      function's name, the kit's, the fleet's, the framework's).
    * ``tags`` — labels recorded with the saga (any collection of strings).
    * ``gate`` — the pre-flight gate (None: the door's, else the default gate).
    * ``wal`` — the log (None: the door's, else the default log): a WAL, or a file path or log
      URL as ``--wal-path`` takes it (the process's one writer for it: ``log.default.shared_log``).
    * ``wait_for_commit`` — every durable step waits until its commit record is durable.
    * ``compensation_retry`` — how each undo is retried before it counts as failed.
    * ``halt_on_compensation_failure`` — stop the unwind at the first undo that fails
      (the rest is left to the recovery daemon) instead of going on with older steps.
    * ``rollback_grace`` — seconds the saga's end (a rollback, or the commit) waits for its
      steps still in flight (several tool calls at once), default 30. A step still running
      after that is recorded as in flight and escalated; if it commits later, it is undone
      the moment it lands. Each step's own ``timeout=`` bounds it sooner.
    """

    name: str | None = None
    tags: frozenset[str] = frozenset()
    gate: GatePort | None = None
    wal: WAL | None = None
    wait_for_commit: bool = False
    compensation_retry: RetryPolicy = COMPENSATION_RETRY
    halt_on_compensation_failure: bool = True
    rollback_grace: float = ROLLBACK_GRACE

    def __post_init__(self) -> None:
        if self.name is not None and not isinstance(self.name, str):
            raise ConfigurationError(f"name= must be a string, got {self.name!r}")
        tags: Any = self.tags
        if tags.__class__ is not frozenset:  # callers may pass any collection of names
            if isinstance(tags, str) or not isinstance(tags, Iterable):
                raise ConfigurationError(f"tags= must be a collection of strings like {{'billing'}}, got {tags!r}")
            tags = frozenset(tags)
            object.__setattr__(self, "tags", tags)
        if not all(isinstance(t, str) for t in tags):
            raise ConfigurationError(f"tags= must be strings, got {sorted(map(repr, tags))}")
        # Not isinstance(gate, GatePort): the structural check is too slow for every saga.
        if self.gate is not None and not callable(getattr(self.gate, "check", None)):
            raise ConfigurationError(f"gate= must be a gate (GatePort: check, check_async, observe), got {self.gate!r}")
        wal: Any = self.wal  # a door may pass what SagaKwargs allows: a path or URL too
        if wal is not None and not isinstance(wal, WAL):
            # A path or URL, as --wal-path takes it: the process's one writer for it (log.default).
            object.__setattr__(self, "wal", log_argument(wal))
        for flag in ("wait_for_commit", "halt_on_compensation_failure"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag}= must be True or False, got {getattr(self, flag)!r}")
        grace = self.rollback_grace
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not math.isfinite(grace) or grace < 0:
            raise ConfigurationError(
                f"rollback_grace= must be a number of seconds >= 0 (how long a rollback waits for the steps "
                f"still in flight), got {grace!r}"
            )
        if not isinstance(self.compensation_retry, RetryPolicy):
            raise ConfigurationError(f"compensation_retry= must be a RetryPolicy, got {self.compensation_retry!r}")

    @classmethod
    def build(
        cls, options: SagaOptions | None = None, more: Mapping[str, Any] | None = None, **defaults: Any
    ) -> SagaOptions:
        """One SagaOptions from what a door's caller gave: ``options`` and/or keywords ``more``.

        Each option may come either way; one set both ways (in ``options`` away from its
        default, and as a keyword) is refused (which one was meant?), so is an unknown one.
        ``defaults`` are the door's own ``name`` / ``gate`` / ``wal``: they fill only what the
        caller left None.
        """
        if options is not None and not isinstance(options, SagaOptions):
            raise ConfigurationError(f"options= must be a SagaOptions, got {type(options).__name__}")
        if more:
            if not more.keys() <= _NAMES:
                unknown = sorted(set(more) - _NAMES)
                raise ConfigurationError(f"unknown saga option(s) {unknown}; the options are: {', '.join(sorted(_NAMES))}")
            if options is not None:
                given = {k: v for k, v in more.items() if v is not None or k not in _NONE_IS_UNSET}
                both = sorted(k for k in given if getattr(options, k) != _DEFAULTS[k])
                if both:
                    raise ConfigurationError(
                        f"saga option(s) {both} given both in options= and as arguments; give each once"
                    )
                options = replace(options, **given)
            else:
                options = cls(**more)
        elif options is None:
            options = _PLAIN
        if defaults:
            fill = {k: v for k, v in defaults.items() if v is not None and getattr(options, k) is None}
            if fill:
                options = replace(options, **fill)
        return options

    def with_changes(self, **changes: Any) -> SagaOptions:
        """A copy with some options changed (validated like a new one)."""
        return replace(self, **changes)


def split_saga_options(kwargs: Mapping[str, Any]) -> tuple[SagaKwargs, dict[str, Any]]:
    """``kwargs`` split into the saga options and the rest (a run helper's framework keywords).

    What an adapter's run helper does with its ``**kwargs``:
    ``saga, run = split_saga_options(run)``, then ``adapter.boundary(options=options, **saga)``
    and ``agent.run(**run)``.
    """
    saga: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in kwargs.items():
        (saga if key in _NAMES else rest)[key] = value
    return saga, rest  # type: ignore[return-value]  # the keys are SagaKwargs' own


def positional_wal(wal: WAL, more: SagaKwargs) -> SagaKwargs:
    """``more`` with the log a door took positionally (``saga_scope(wal)``); given twice is refused."""
    if "wal" in more:
        raise ConfigurationError("the log was given twice, positionally and as wal=; give it once")
    return {**more, "wal": wal}


def saga_option_names() -> frozenset[str]:
    """Every option a door that opens a saga accepts."""
    return _NAMES


_NAMES = frozenset(f.name for f in fields(SagaOptions))
# An option of options= "given" is one away from its default (a dataclass cannot tell an
# explicit default from an omitted one, and the two mean the same).
_DEFAULTS = {f.name: f.default for f in fields(SagaOptions)}
# A keyword left at None beside options= is "not given" for these (a door's own
# default of None, as in saga_scope(wal=None, options=...)), never a conflict.
_NONE_IS_UNSET = frozenset({"name", "gate", "wal"})
# Most sagas give no option at all: one shared, immutable instance.
_PLAIN = SagaOptions()
