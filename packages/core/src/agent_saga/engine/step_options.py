"""StepOptions: every per-step option, in one frozen type.

Each front door (``Saga.execute``, ``@tool``, ``AgentKit.safe_tool``, ``SagaFleet.register``,
every adapter's ``wrap_tool``, the tool policy) builds one of these and hands it to the
engine, so a new option is added here, once, and reaches all of them. ``StepKwargs`` is
the same set of names as keyword arguments (for ``**options`` signatures); a test keeps
the two in step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from types import FunctionType, MappingProxyType
from typing import Any, TypedDict

from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.engine.retry import RetryPolicy
from agent_saga.errors import CompensationError, ConfigurationError
from agent_saga.jsonpath import JsonPath
from agent_saga.log.results import RECORD_RESULT_MODES, RecordResult
from agent_saga.registry import CompensationFactory
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = ["PLAIN", "StepKwargs", "StepOptions", "built_before", "option_names"]

_NO_PATHS: Mapping[str, JsonPath] = MappingProxyType({})


class StepKwargs(TypedDict, total=False):
    """The step options as keyword arguments (everything but ``semantics``)."""

    compensate: CompensationFactory | Compensation | None
    retry: RetryPolicy | None
    timeout: float | None
    fallback_action: Callable[..., Any] | None
    inline: bool
    require_boundary: bool
    policy_args: Mapping[str, str]
    reveal: Collection[str]
    wait_for_commit: bool | None
    origin: str | None
    reconcile: ReconcilePolicy | bool
    record_result: RecordResult
    not_applied_on: type[BaseException] | tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How one step behaves. Semantics are required and never inferred.

    * ``compensate`` — a factory ``(forward_result) -> Compensation`` (only ever called
      with the real result), or a ``Compensation`` known before the call.
    * ``retry`` / ``timeout`` — bounded attempts, each under its own timeout, one key.
    * ``fallback_action`` — run when the forward fails; a step of its own, undone like any.
    * ``inline`` — run a sync forward on the event loop instead of a worker thread.
    * ``require_boundary`` — refuse (``BoundaryRequired``) outside a saga instead of
      calling straight through.
    * ``policy_args`` — extra values for the gate, ``{"amount": "$.order.total"}``: JSON
      paths into the call's arguments, added to what the gate polices and the log records.
    * ``reveal`` — argument names logged in clear although they look like secrets.
    * ``wait_for_commit`` — wait until the step's commit record is durable before
      returning (one more flush); None takes the saga's setting.
    * ``origin`` — the framework or front door that made the call (observers, the log).
    * ``reconcile`` — when the forward raises and a ``@reconciler`` is registered for the
      tool, ask it before deciding the step is UNKNOWN (True: the default policy; a
      ``ReconcilePolicy`` to tune it; False: never ask inline).
    * ``record_result`` — what the commit record keeps of the forward's return value:
      ``"value"`` (redacted like the arguments, when it is plain JSON of at most
      ``MAX_RESULT_BYTES``; else its shape), ``"shape"`` (type, keys, length: never a
      value), or ``"none"`` (see ``agent_saga.log.results``).
    * ``not_applied_on`` — exception classes that mean the call did nothing (a validation
      error raised before any effect): such a failure is NOT_APPLIED, as ``NotApplied`` is,
      instead of UNKNOWN, so the rollback needs no undo for it and can be clean.
    """

    semantics: ActionSemantics
    compensate: CompensationFactory | Compensation | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    fallback_action: Callable[..., Any] | None = None
    inline: bool = False
    require_boundary: bool = False
    policy_args: Mapping[str, str] = field(default_factory=dict)
    reveal: frozenset[str] = frozenset()
    wait_for_commit: bool | None = None
    origin: str | None = None
    reconcile: ReconcilePolicy | bool = True
    record_result: RecordResult = "value"
    not_applied_on: tuple[type[BaseException], ...] = ()
    # Parsed from policy_args once, not per call.
    _paths: Mapping[str, JsonPath] = field(default_factory=lambda: _NO_PATHS, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        sem = ActionSemantics.parse(self.semantics)
        setattr_(self, "semantics", sem)
        comp = self.compensate
        if comp is not None:
            if sem is ActionSemantics.IRREVERSIBLE:
                raise CompensationError(
                    "a step declared IRREVERSIBLE was given compensate=: an effect that can be undone is "
                    "COMPENSABLE. Change the semantics, or drop compensate="
                )
            if not callable(comp) and not isinstance(comp, Compensation):
                raise CompensationError(
                    f"compensate= must be a factory (forward_result) -> Compensation, or a Compensation "
                    f"known before the call; got {type(comp).__name__}"
                )
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(f"retry= must be a RetryPolicy, got {type(self.retry).__name__}")
        if self.timeout is not None and not _positive(self.timeout):
            raise ConfigurationError(f"timeout= must be a positive number of seconds, got {self.timeout!r}")
        if self.fallback_action is not None and not callable(self.fallback_action):
            raise ConfigurationError(f"fallback_action= must be callable, got {self.fallback_action!r}")
        for name in ("inline", "require_boundary"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name}= must be True or False, got {getattr(self, name)!r}")
        if self.wait_for_commit is not None and not isinstance(self.wait_for_commit, bool):
            raise ConfigurationError(f"wait_for_commit= must be True, False or None, got {self.wait_for_commit!r}")
        if not isinstance(self.reconcile, (bool, ReconcilePolicy)):
            raise ConfigurationError(f"reconcile= must be True, False or a ReconcilePolicy, got {self.reconcile!r}")
        if self.record_result not in RECORD_RESULT_MODES:
            raise ConfigurationError(
                f"record_result= must be one of {', '.join(map(repr, RECORD_RESULT_MODES))}, got {self.record_result!r}"
            )
        declared: Any = self.not_applied_on  # one class or a tuple of them, as isinstance takes
        if declared != ():
            declared = declared if isinstance(declared, tuple) else (declared,)
            if not declared or not all(isinstance(c, type) and issubclass(c, Exception) for c in declared):
                raise ConfigurationError(
                    f"not_applied_on= must be an exception class or a tuple of them (ValueError, ...), got {self.not_applied_on!r}"
                )
            setattr_(self, "not_applied_on", declared)
        if self.origin is not None and not isinstance(self.origin, str):
            raise ConfigurationError(f"origin= must be a name, got {self.origin!r}")
        reveal: Any = self.reveal  # callers may pass any collection of names
        if isinstance(reveal, str) or not isinstance(reveal, Collection):
            raise ConfigurationError(f"reveal= must be a collection of argument names, got {reveal!r}")
        setattr_(self, "reveal", frozenset(reveal))
        if self.policy_args:
            setattr_(self, "_paths", MappingProxyType(_parse_paths(self.policy_args)))

    @classmethod
    def build(
        cls,
        options: StepOptions | None = None,
        semantics: ActionSemantics | str | None = None,
        more: Mapping[str, Any] | None = None,
    ) -> StepOptions:
        """``options`` (or a new StepOptions) with ``semantics`` and ``more`` applied.

        What every front door calls with what its caller gave it: an unknown option is
        refused by name, and a missing ``semantics`` says how to declare one.
        """
        if more and not more.keys() <= _NAMES:
            unknown = sorted(set(more) - _NAMES)
            raise ConfigurationError(
                f"unknown step option(s) {unknown}; the options are: semantics, {', '.join(sorted(_NAMES))}"
            )
        if options is None:
            if semantics is None:
                raise ConfigurationError(
                    "a step needs semantics= (REVERSIBLE, COMPENSABLE or IRREVERSIBLE); agent-saga never "
                    "guesses whether an effect can be undone"
                )
            if not more:
                plain = PLAIN.get(semantics) if isinstance(semantics, str) else None
                return plain if plain is not None else cls(ActionSemantics.parse(semantics))
            return _from_keywords(semantics, more)
        if not isinstance(options, StepOptions):
            raise ConfigurationError(f"options= must be a StepOptions, got {type(options).__name__}")
        if semantics is None and not more:
            return options
        changes = dict(more or {})
        if semantics is not None:
            changes["semantics"] = ActionSemantics.parse(semantics)
        return replace(options, **changes)

    def with_changes(self, **changes: Any) -> StepOptions:
        """A copy with some options changed (validated like a new one)."""
        semantics = changes.pop("semantics", None)
        return StepOptions.build(self, semantics, changes)

    @property
    def known_before_call(self) -> bool:
        """Whether the undo is declared not to need the result (it can rescue an UNKNOWN step)."""
        comp = self.compensate
        return isinstance(comp, Compensation) or bool(getattr(comp, "known_before_call", False))

    def policed(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` plus the ``policy_args`` values read from them (KeyError naming a miss)."""
        out = dict(args)
        for name, path in self._paths.items():
            out[name] = path.find(args)
        return out


# Options built from keywords, kept by value: a front door that passes the same
# compensate= (or inline=True, ...) on every call builds and validates them once.
# Only values that hold nothing else alive are kept (no closures, bound methods or
# partials, which may hold a call's data), and the type is part of the key so that
# inline=1 is never answered with the options validated for inline=True.
_BUILT: dict[tuple[Any, ...], StepOptions] = {}
_BUILT_MAX = 1024
_KEPT_TYPES = frozenset({bool, int, float, str, type(None), RetryPolicy, ReconcilePolicy})


def _key(semantics: ActionSemantics | str, more: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What options built from these keywords are kept under; None: they are not kept."""
    key: tuple[Any, ...] = (semantics,)
    for name, value in more.items():
        kind = type(value)
        if kind not in _KEPT_TYPES and not (kind is FunctionType and value.__closure__ is None):
            return None
        key += (name, kind, value)
    return key


def built_before(semantics: ActionSemantics | str, more: Mapping[str, Any]) -> StepOptions | None:
    """The options an earlier call built (and so checked) from these keywords; None when none is kept.

    A front door may take them without calling ``StepOptions.build``: nothing in them can be refused.
    """
    key = _key(semantics, more)
    try:
        return _BUILT.get(key) if key is not None else None
    except TypeError:  # e.g. a RetryPolicy given a list: validated by build, never kept
        return None


def _from_keywords(semantics: ActionSemantics | str, more: Mapping[str, Any]) -> StepOptions:
    built = built_before(semantics, more)
    if built is not None:
        return built
    options = StepOptions(ActionSemantics.parse(semantics), **more)
    key = _key(semantics, more)
    if key is not None:
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        try:
            _BUILT[key] = options
        except TypeError:  # unhashable, as built_before found: never kept
            pass
    return options


def _positive(seconds: Any) -> bool:
    return (
        isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0 and math.isfinite(seconds)
    )


def _parse_paths(policy_args: Mapping[str, str]) -> dict[str, JsonPath]:
    if not isinstance(policy_args, Mapping):
        raise ConfigurationError(f"policy_args= must map names to JSON paths, got {policy_args!r}")
    paths: dict[str, JsonPath] = {}
    for name, text in policy_args.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise ConfigurationError(f"policy_args= must map names to JSON paths like '$.amount', got {name!r}: {text!r}")
        try:
            paths[name] = JsonPath.parse(text)
        except ValueError as err:
            raise ConfigurationError(f"policy_args[{name!r}]: {err}") from None
    return paths


def option_names() -> frozenset[str]:
    """Every option a front door accepts besides ``semantics``."""
    return _NAMES


_NAMES = frozenset(f.name for f in fields(StepOptions) if f.init) - {"semantics"}
#: The options most steps use: just semantics (a member or its name). Built once, shared (they are immutable).
PLAIN: dict[Any, StepOptions] = {}
for _sem in ActionSemantics:
    PLAIN[_sem] = PLAIN[_sem.value] = StepOptions(_sem)
